"""Pack a collection as installed on this controller (the `ansible` package from PyPI carries
ansible.posix and community.general) into a tarball that `ansible-galaxy collection install --offline`
takes: MANIFEST.json, FILES.json and the files at the top level.

The PyPI package leaves out some files its FILES.json lists (CI configuration such as
.azure-pipelines/), and ansible-galaxy extracts every file FILES.json names, so FILES.json is written
again with the files that are there, each still checked against the checksum the collection's authors
recorded (a changed file stops the pack), and MANIFEST.json gets FILES.json's new checksum.

    python3 pack_installed_collection.py COLLECTION_DIR OUT_DIR   (prints the tarball's path)
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
import tarfile
from pathlib import Path


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, 0
    tar.addfile(info, io.BytesIO(data))


def pack(collection: Path, out_dir: Path) -> Path:
    manifest = json.loads((collection / "MANIFEST.json").read_text())
    files = json.loads((collection / "FILES.json").read_text())
    kept = []
    for entry in files["files"]:
        path = collection / entry["name"]
        if entry["name"] == "." or (entry["ftype"] == "dir" and path.is_dir()):
            kept.append(entry)
        elif entry["ftype"] == "file" and path.is_file():
            if sha256(path.read_bytes()) != entry["chksum_sha256"]:
                raise SystemExit(f"{path}: not the file its collection's FILES.json records")
            kept.append(entry)
    files_json = json.dumps({**files, "files": kept}, indent=4).encode()
    manifest["file_manifest_file"]["chksum_sha256"] = sha256(files_json)
    info = manifest["collection_info"]
    tarball = out_dir / f"{info['namespace']}-{info['name']}-{info['version']}.tar.gz"
    with tarfile.open(tarball, "w:gz") as tar:
        _add(tar, "MANIFEST.json", json.dumps(manifest, indent=4).encode())
        _add(tar, "FILES.json", files_json)
        for entry in kept:
            if entry["name"] == ".":
                continue
            path = collection / entry["name"]
            member = tar.gettarinfo(str(path), arcname=entry["name"])
            member.uid = member.gid = 0
            member.uname = member.gname = ""
            member.mtime = 0
            if member.isdir():
                tar.addfile(member)
            else:
                with path.open("rb") as data:
                    tar.addfile(member, data)
    return tarball


if __name__ == "__main__":
    print(pack(Path(sys.argv[1]), Path(sys.argv[2])))
