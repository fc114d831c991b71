"""`mlsys bench comm`: NCCL collectives measured against the alpha-beta model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from dataclasses import dataclass, replace

import click

from ..calc.comm.collectives import COLLECTIVES
from ..errors import MlsysError
from ..specs.cluster import MAX_GPUS_PER_NODE
from ..units import parse_bytes
from . import render
from .options import reject_unused


def _gpu_count(backend: str, nproc: int | None) -> int:
    """The processes to start: --nproc (checked against the GPUs present) or every GPU; before any worker starts."""
    try:
        import torch
    except ImportError as exc:
        raise MlsysError(f"mlsys bench comm needs torch ({exc}); pip install 'mlsyscalc[gpu]'") from None
    if backend == "gloo":
        return nproc or 2
    found = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if found < max(2, nproc or 2):
        raise MlsysError(f"mlsys bench comm with NCCL needs at least {max(2, nproc or 2)} CUDA GPUs (found "
                         f"{found}); --backend gloo runs a CPU smoke test")
    return nproc or found


def _launch(nproc: int, worker_args: list[str]) -> None:
    """torchrun --standalone for one node; worker output goes to stderr so stdout stays parseable."""
    from ..bench.comm_bench import SAFE_ENV

    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
           "-m", "mlsyscalc.bench.comm_bench", *worker_args]
    env = {**os.environ, **SAFE_ENV, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    done = subprocess.run(cmd, env=env, stdout=sys.stderr, stderr=sys.stderr)
    if done.returncode != 0:
        raise MlsysError(f"the benchmark workers failed (torchrun exit {done.returncode}); see the log above")


@click.command()
@click.option("--nproc", type=click.IntRange(min=2), help="Processes (GPUs) on this node; default all GPUs.")
@click.option("--collective", "collectives", multiple=True, type=click.Choice(COLLECTIVES),
              help="Repeatable; default all.")
@click.option("--min-size", default="8KiB", show_default=True)
@click.option("--max-size", default="1GiB", show_default=True)
@click.option("--factor", type=click.IntRange(min=2), default=2, show_default=True, help="Size step.")
@click.option("--backend", type=click.Choice(["nccl", "gloo"]), default="nccl", show_default=True,
              help="gloo: a CPU smoke test of the code path (its times say nothing about GPUs).")
@click.option("--cluster", help="Cluster spec for the predictions (a name or JSON file; default: by GPU name); "
              "with --from, every row is priced again with it.")
@click.option("--graph", is_flag=True, help="Also time the calls captured in a CUDA graph and replayed (graph_* "
              "keys: device time without the host's cost to issue each call).")
@click.option("--out", default="comm_bench.jsonl", show_default=True, type=click.Path(dir_okay=False),
              help="JSONL rows, appended as measured; a rerun skips sizes already there.")
@click.option("--from", "from_rows", is_flag=True, help="Do not run: use the rows already in --out.")
@click.option("--calibrate", type=click.Path(dir_okay=False), help="Write a cluster spec fitted to the rows.")
@click.option("--name", default="measured", show_default=True, help="Name of the --calibrate cluster.")
@click.option("--report", type=click.Path(file_okay=False), help="Write README.md, busbw.png and rows here.")
@click.option("--fit-min-size", default="1MiB", show_default=True, help="Smallest size used by the fit.")
@click.option("--fit-gpus", type=click.IntRange(min=2),
              help="Fit --calibrate/--report on the rows of this GPU count only; --report then also writes "
                   "transfer.md, the fit checked on every other GPU count in --out.")
@click.option("--node-gpus", type=click.IntRange(min=2, max=MAX_GPUS_PER_NODE),
              help="GPUs per node of the --calibrate spec (the links it describes reach this many); "
                   "default: the most GPUs the rows or their host had.")
@click.option("--model", type=click.Choice(["protocol", "shared"]), default="protocol", show_default=True,
              help="What --calibrate/--report fit: protocol = per collective (README.md); shared = one link "
                   "bandwidth and buffer cost shared by all-reduce/all-gather/reduce-scatter, no per-step latency "
                   "(shared.md; transfers to other GPU counts of the node).")
@render.output_options
def comm(nproc, collectives, min_size, max_size, factor, backend, cluster, graph, out, from_rows, calibrate, name,
         report, fit_min_size, fit_gpus, node_gpus, model, fmt, as_json):
    """Time NCCL collectives over the GPUs of this node and compare with the alpha-beta model.

    Runs torchrun with one process per GPU (several nodes: start
    `torchrun ... -m mlsyscalc.bench.comm_bench` yourself). Each result is checked element by
    element before it is timed with CUDA events. NCCL_NVLS_ENABLE=0 (NVLink multicast off).
    """
    from ..report import comm as comm_report

    ctx = click.get_current_context()
    if not (calibrate or report):
        reject_unused(ctx, {k: "without --calibrate or --report (nothing is fitted)"
                            for k in ("fit_min_size", "fit_gpus", "node_gpus", "model", "name")})
    if from_rows:
        reject_unused(ctx, {k: "with --from (nothing is measured)"
                            for k in ("nproc", "collectives", "min_size", "max_size", "factor", "backend", "graph")})
    lo, hi, fit_min = parse_bytes(min_size, "--min-size"), parse_bytes(max_size, "--max-size"), parse_bytes(fit_min_size)
    if not from_rows:
        if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # already one of torchrun's workers
            raise MlsysError("inside torchrun, run `-m mlsyscalc.bench.comm_bench` instead of `mlsys bench comm`")
        nproc = _gpu_count(backend, nproc)
        args = ["--out", out, "--min-size", str(lo), "--max-size", str(hi), "--factor", str(factor), "--backend", backend]
        args += [a for c in collectives for a in ("--collective", c)] + (["--cluster", cluster] if cluster else [])
        args += ["--graph"] if graph else []
        _launch(nproc, args)
    rows = comm_report.load_rows(out)
    comm_report.check_rows(rows)
    fit = Fitting(fit_min, calibrate, name, report, fit_gpus, node_gpus, model)
    _render(rows, comm_report, out, fit, cluster, fmt, as_json)


@dataclass(frozen=True)
class Fitting:
    """What to fit and where to write it (the --calibrate/--report options)."""

    min_size: int
    calibrate: str | None
    name: str
    report: str | None
    fit_gpus: int | None
    node_gpus: int | None
    model: str = "protocol"

    def rows(self, rows: list[dict]) -> list[dict]:
        fitted = [r for r in rows if self.fit_gpus is None or r["gpus"] == self.fit_gpus]
        if not fitted:
            raise MlsysError(f"no rows of {self.fit_gpus} GPUs to fit (--fit-gpus)")
        return fitted

    def node_size(self, rows: list[dict]) -> int:
        host = max([int(r.get("env", {}).get("gpu_count_local") or 0) for r in rows] + [r["gpus"] for r in rows])
        return self.node_gpus or host

    def command(self, out: str) -> str:
        return (f"mlsys bench comm --from --out {out} --report {self.report} --name {self.name} "
                f"--fit-min-size {self.min_size}" + (f" --calibrate {self.calibrate}" if self.calibrate else "")
                + (f" --fit-gpus {self.fit_gpus}" if self.fit_gpus else "")
                + (f" --node-gpus {self.node_gpus}" if self.node_gpus else "")
                + (f" --model {self.model}" if self.model != "protocol" else ""))


def _render(rows, comm_report, out, fit: Fitting, cluster, fmt, as_json) -> None:
    import json

    from ..bench.comm_bench import default_cluster, predict

    datasheet = cluster or default_cluster(rows[0].get("env", {}))
    if cluster:  # the rows carry the prediction of the cluster they were measured with: price them with this one
        rows = [{**r, **predict(r, cluster, r.get("algo", "ring"))} if r.get("ok") else r for r in rows]
    data = {"rows": rows, "cluster": datasheet}
    notes = ["busbw/algbw as nccl-tests defines them; prediction_error = (measured - predicted) / predicted"]
    fit_min, calibrate, name, report = fit.min_size, fit.calibrate, fit.name, fit.report
    if fit.model == "shared" and (calibrate or report):
        notes += _shared(rows, fit, datasheet, out, data)
    elif calibrate or report:
        fitted_rows = fit.rows(rows)
        measured = replace(comm_report.measured_cluster(fitted_rows, fit_min, name), gpus_per_node=fit.node_size(rows))
        data["calibrated"] = measured.to_dict()
        if calibrate:
            Path(calibrate).write_text(json.dumps(measured.to_dict(), indent=2) + "\n")
            notes.append(f"fitted cluster spec written to {calibrate}")
        if report:
            path = comm_report.write_report(fitted_rows, Path(report), fit_min, datasheet, measured, fit.command(out))
            notes.append(f"report written to {path}")
            if fit.fit_gpus:
                from ..report.comm_transfer import write_transfer

                path = write_transfer(rows, measured, fit.fit_gpus, datasheet, fit_min, Path(report), fit.command(out))
                (Path(report) / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))  # every count
                notes.append(f"transfer check written to {path}")
    columns = ["collective", "size_bytes", "time_s", "algbw_GBps", "busbw_GBps", "predicted_busbw_GBps",
               "prediction_error"]
    table = [[r.get(c) for c in columns] for r in rows]
    render.emit(render.Output(data, (render.table(f"NCCL vs alpha-beta ({datasheet})", columns, table),),
                              tuple(notes)), fmt, as_json)


def _shared(rows, fit: Fitting, datasheet: str, out: str, data: dict) -> list[str]:
    """--model shared: the shared link fit as a cluster spec (--calibrate) and shared.md (--report)."""
    import json

    from ..report.comm_shared import shared_spec, write_shared

    fitted_rows = fit.rows(rows)
    shared, spec = shared_spec(fitted_rows, fit.name, fit.node_size(rows))
    data["calibrated"] = spec.to_dict()
    notes = []
    if fit.calibrate:
        Path(fit.calibrate).write_text(json.dumps(spec.to_dict(), indent=2) + "\n")
        notes.append(f"fitted cluster spec written to {fit.calibrate}")
    if fit.report:
        gpus = fit.fit_gpus or max(r["gpus"] for r in fitted_rows)
        path = write_shared(rows, fitted_rows, shared, spec, gpus, datasheet, fit.min_size, Path(fit.report),
                            fit.command(out))
        (Path(fit.report) / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        notes.append(f"shared fit report written to {path}")
    return notes
