#!/bin/sh
# Fresh host keys for this container (collected by scale-lab.sh through `docker exec`), then sshd in
# the foreground. set -eu: a node whose keys could not be made must not start sshd.
set -eu
ssh-keygen -A -q
exec /usr/sbin/sshd -D -e
