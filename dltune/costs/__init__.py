"""What findings cost and what tunings bought: a finding's price in GPU-hours a day (impact) and the
tuning ledger's before/after comparison (ledger). Pure: figures in, judgements out."""
