"""The fleet: what concerns more than one node or the scheduler around them. The report over many
nodes' audits (cluster) and the reading of one node's output file (node_files), the Slurm health
check with its debounce and drain bounds (slurm_health), remediation's decisions (remediation) and
operators' acknowledgements (acks)."""
