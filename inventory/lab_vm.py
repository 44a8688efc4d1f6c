#!/usr/bin/env python3
"""The lab's NFS VM (tests/lab/nfs-vm.sh, started by `make demo`) as one more node of the lab, with
real kernel NFS mounts: Ansible runs this script (its `script` inventory plugin) beside lab.yml. It
lists the VM only while the VM runs, so `-i inventory` works the same without it."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.lab.nfsvm import inventory

if __name__ == "__main__":
    # --host NAME: every host's vars are already in _meta
    print(json.dumps(inventory() if "--host" not in sys.argv else {}))
