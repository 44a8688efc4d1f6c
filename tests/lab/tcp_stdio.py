"""tcp_stdio.py HOST PORT: join stdin/stdout to a TCP connection, as `nc HOST PORT` would (this machine
has neither nc nor socat). The lab's inventory runs it as SSH's ProxyCommand inside the storage
namespace, where the NFS VM's SSH port is: `ip netns exec dltune-nfs-storage python3 tcp_stdio.py ...`."""

from __future__ import annotations

import os
import socket
import sys
import threading

CHUNK = 65536


def stdin_to_socket(connection: socket.socket) -> None:
    while data := os.read(0, CHUNK):
        connection.sendall(data)
    # SSH closed its end: tell the server, and keep reading its last bytes.
    connection.shutdown(socket.SHUT_WR)


def main() -> int:
    if len(sys.argv) != 3:
        print("usage: tcp_stdio.py HOST PORT", file=sys.stderr)
        return 2
    host, port = sys.argv[1], int(sys.argv[2])
    try:
        connection = socket.create_connection((host, port), timeout=30)
    except OSError as error:
        print(f"tcp_stdio: cannot connect to {host}:{port}: {error}", file=sys.stderr)
        return 1
    connection.settimeout(None)
    threading.Thread(target=stdin_to_socket, args=(connection,), daemon=True).start()
    out = sys.stdout.buffer
    while data := connection.recv(CHUNK):
        out.write(data)
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
