"""One module per command, and what they share: options and argument checks (options), how they
write (output), and the node's audit as several commands run it (node)."""
