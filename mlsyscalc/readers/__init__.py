"""Every file a command reads passes one validating reader of its kind (docs/cli.md, "Files").

`files` reads text, JSON, JSON Lines and CSV the same way for every kind (size limit, UTF-8 with or
without a byte-order mark, no NaN or infinity, ragged CSV rows and over-long fields refused, line
numbers kept); `schema` checks one record's fields. The kinds: serving traces and length columns
(`trace`), benchmark rows (`rows`), NCCL rows (`comm_rows`), `mlsys bench model` rows for
`mlsys calibrate` (`model_rows`), `--measured` folders (`measured`). Cluster and calibration JSON
are checked where their specs are built (`specs.cluster`, `calc.roofline.calibration`) with these helpers.
A bad file raises MlsysError naming the file, the line and the key; the CLI exits 2.

This package imports only errors, validate and units, so specs, calc, bench, report and cli may all
use it; nothing here imports torch, numpy or pandas.
"""
