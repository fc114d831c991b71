"""Value tests for the fresh-family mutants of the train half that survived
(reports/mutation/fresh_train.jsonl; docs/mutation.md, "Fresh family, train and holdout halves")."""
