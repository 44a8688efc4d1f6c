"""The fleet: what concerns more than one node or the scheduler around them. The report over many
nodes' audits (cluster), the Slurm health check with its history and debounce (slurm_health,
health_state), remediation's decisions (remediation) and operators' acknowledgements (acks)."""
