"""What one node's audit becomes for its readers: the human table, JSON and Ansible facts (report),
and the node_exporter textfile (prometheus). Renderers only: they read nothing of the host."""
