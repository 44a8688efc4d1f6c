"""What one node's audit becomes for its readers: the human table and the consoles (human, the only
module that loads rich), JSON and Ansible facts (report), and the node_exporter textfile (prometheus).
Renderers only: they read nothing of the host."""
