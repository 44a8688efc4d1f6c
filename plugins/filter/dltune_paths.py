"""The one input check every dltune role runs before it changes anything (entry point
``roles/dltune/tasks/validate_inputs.yml``): paths by allow-list, mount options as they will be joined.

- ``dltune_path_errors``: each path a role creates, chowns, chmods, mounts over or deletes must be
  absolute and written in its one normal form (no ``.``, ``..``, ``//``, trailing ``/``, nothing a
  shell, fstab or a mount option list reads differently), never a system directory or a parent of
  one (``/dev/shm`` made root 0755 breaks every DataLoader; ``/`` deleted is the node), never
  through a system link (``/var/run`` is ``/run``), and below one of the directories the variable
  allows.
- ``dltune_mount_option_errors``: a list of mount options is joined with commas into one fstab
  field, so it is judged joined: an item holding a comma is two options (``"10s,ro"`` adds ``ro``),
  and options that contradict each other (``noatime`` and ``relatime``, ``ro`` and ``rw``, two
  ``size=``) are refused instead of letting the last one win silently.

Pure functions, no I/O: a path is judged as text (links on the node are the roles' ``stat`` tasks'
business). Unit tests: tests/unit/test_dltune_paths_filter.py. Each message is one line that names
the variable and its value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# Directories of the operating system and of every user: never the value of a path a role owns, nor
# a parent of one. Directories a role owns by design (/etc/dltune, /etc/ansible/facts.d) are not here.
SYSTEM_DIRS = frozenset(
    {
        "/",
        "/bin",
        "/boot",
        "/boot/efi",
        "/dev",
        "/dev/hugepages",
        "/dev/mqueue",
        "/dev/pts",
        "/dev/shm",
        "/etc",
        "/etc/ansible",
        "/etc/apt",
        "/etc/default",
        "/etc/dltune/expected.d",
        "/etc/modprobe.d",
        "/etc/netplan",
        "/etc/network",
        "/etc/network/if-up.d",
        "/etc/pam.d",
        "/etc/profile.d",
        "/etc/security",
        "/etc/slurm",
        "/etc/slurm-llnl",
        "/etc/ssh",
        "/etc/sudoers.d",
        "/etc/sysctl.d",
        "/etc/systemd",
        "/etc/systemd/system",
        "/home",
        "/lib",
        "/lib32",
        "/lib64",
        "/libx32",
        "/lost+found",
        "/media",
        "/mnt",
        "/opt",
        "/proc",
        "/root",
        "/run",
        "/run/lock",
        "/run/user",
        "/sbin",
        "/snap",
        "/srv",
        "/sys",
        "/tmp",
        "/usr",
        "/usr/bin",
        "/usr/games",
        "/usr/include",
        "/usr/lib",
        "/usr/lib32",
        "/usr/lib64",
        "/usr/libexec",
        "/usr/libx32",
        "/usr/local",
        "/usr/local/bin",
        "/usr/local/etc",
        "/usr/local/games",
        "/usr/local/include",
        "/usr/local/lib",
        "/usr/local/man",
        "/usr/local/sbin",
        "/usr/local/share",
        "/usr/local/src",
        "/usr/sbin",
        "/usr/share",
        "/usr/src",
        "/var",
        "/var/backups",
        "/var/cache",
        "/var/crash",
        "/var/lib",
        "/var/lib/apt",
        "/var/lib/dpkg",
        "/var/lib/systemd",
        "/var/local",
        "/var/lock",
        "/var/log",
        "/var/mail",
        "/var/opt",
        "/var/run",
        "/var/snap",
        "/var/spool",
        "/var/tmp",
    }
)
# Links every system has (merged /usr, /run): a path through one names another place than it says.
SYSTEM_LINKS = (
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/var/run",
    "/var/lock",
    "/proc/self",
    "/proc/thread-self",
    "/dev/fd",
    "/dev/stdin",
    "/dev/stdout",
    "/dev/stderr",
    "/etc/mtab",
)
# A path component the roles write into fstab, shell files, systemd units and mount options verbatim:
# no space, comma, quote, glob, %, $, ~ or backslash; not starting with "-" (read as an option) or "."
# ("." and ".." and hidden names).
_COMPONENT = re.compile(r"[A-Za-z0-9_@+][A-Za-z0-9_.@+-]*")
_MAX_PATH = 4095
_MAX_COMPONENT = 255

# One option of a mount option list: what fstab and mount(8) take without quoting.
_OPTION = re.compile(r"[A-Za-z0-9_.:@/+=%-]+")
# Options that set the same thing: at most one of each group (the kernel would keep the last one).
_GROUPS: dict[str, str] = {
    **dict.fromkeys(
        ("atime", "noatime", "relatime", "norelatime", "strictatime", "nostrictatime"), "atime mode"
    ),
    **dict.fromkeys(("ro", "rw"), "read-only or read-write"),
    **dict.fromkeys(("sync", "async"), "sync or async"),
    **dict.fromkeys(("hard", "soft", "softerr"), "hard or soft"),
    **dict.fromkeys(("tcp", "udp", "rdma"), "transport"),
    **dict.fromkeys(("fg", "bg"), "foreground or background"),
}
# key=value options whose key has another spelling (NFS), or that a flag above also sets (proto=tcp is tcp).
_KEY_ALIASES = {"nfsvers": "vers", "proto": "transport"}


def _shown(value: Any) -> str:
    """The value as the message shows it: plain when it is a simple string, quoted otherwise."""
    if isinstance(value, str) and value and value.isprintable() and not any(c.isspace() for c in value):
        return value
    return repr(value)


def _shape_problem(value: Any) -> str:
    """Why ``value`` is not an absolute path in its one normal form ("" when it is)."""
    if not isinstance(value, str) or not value:
        return "not a path (give an absolute path such as /localscratch)"
    if not value.startswith("/"):
        return "not an absolute path"
    if len(value) > _MAX_PATH:
        return f"longer than {_MAX_PATH} characters"
    if value == "/":
        return ""
    if value.endswith("/"):
        return "ends with '/' (write it without the trailing slash)"
    if "//" in value:
        return "holds '//' (write each '/' once)"
    for part in value[1:].split("/"):
        if part in (".", ".."):
            return f"holds a '{part}' component (write the path it means)"
        if len(part) > _MAX_COMPONENT:
            return f"has a component longer than {_MAX_COMPONENT} characters"
        if not _COMPONENT.fullmatch(part):
            return (
                f"has the component {part!r}: use letters, digits and _.@+- (not first: '.' or '-'), "
                "no spaces, commas, quotes, globs or other characters fstab, shells and units read "
                "differently"
            )
    return ""


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _system_problem(path: str) -> str:
    if path == "/":
        return "/ itself (every system directory is below it)"
    if path in SYSTEM_DIRS:
        return "a system directory"
    inside = sorted(d for d in SYSTEM_DIRS if d.startswith(path + "/"))
    if inside:
        return f"a parent of the system directory {inside[0]}"
    return ""


def _link_problem(path: str) -> str:
    for link in SYSTEM_LINKS:
        if path != link and _under(path, link):
            return f"below {link}, a system link (give the real path it points to)"
    return ""


def dltune_path_problem(
    value: Any,
    name: str,
    allowed_under: Sequence[str] | None = None,
    system_ok: bool = False,
    parent_created: bool = False,
) -> str:
    """One line naming ``name`` and ``value`` when the path is refused, "" when it is accepted.

    allowed_under: the directories the path may be (or be below); system directories in it allow
    only what is below them (``/var/tmp`` allows ``/var/tmp/x``, never ``/var/tmp``). None: no
    allow-list (paths the role only reads). system_ok: the path may be a system directory (a mount
    whose options the role edits, a read-only sysfs root). parent_created: the role also creates,
    chowns and chmods the path's directory, which must then not be a system directory either.
    """
    refused = f"{name}={_shown(value)} is refused: "
    problem = _shape_problem(value)
    if problem:
        return refused + problem
    problem = _link_problem(value)
    if problem:
        return refused + problem
    if not system_ok:
        problem = _system_problem(value)
        if problem:
            return refused + problem
    if parent_created and value != "/":
        # Only the directory itself gets the role's owner and mode, not what is below it.
        parent = value.rsplit("/", 1)[0] or "/"
        if parent in SYSTEM_DIRS:
            return (
                refused + f"its directory {parent}, which the role creates and chmods, is a system directory"
            )
    if allowed_under is None:
        return ""
    if isinstance(allowed_under, str) or not isinstance(allowed_under, Iterable):
        return refused + f"its allow-list {_shown(allowed_under)} is not a list of directories"
    allowed = list(allowed_under)
    for directory in allowed:
        if _shape_problem(directory) or directory == "/":
            return (
                refused
                + f"its allow-list holds {_shown(directory)}, which is not an absolute directory below /"
            )
    if not any(_under(value, directory) for directory in allowed):
        where = ", ".join(allowed) if allowed else "nothing"
        return refused + f"not at or below an allowed directory ({where})"
    return ""


def dltune_path_errors(checks: Iterable[Mapping[str, Any]]) -> list[str]:
    """The refusals of a list of checks {name, value, allowed_under?, system_ok?, parent_created?}."""
    errors = []
    for check in checks:
        problem = dltune_path_problem(
            check.get("value"),
            str(check.get("name", "?")),
            check.get("allowed_under"),
            bool(check.get("system_ok", False)),
            bool(check.get("parent_created", False)),
        )
        if problem:
            errors.append(problem)
    return errors


def _setting(option: str) -> tuple[str, str]:
    """What an option sets, as (setting, value): options with the same setting and another value conflict."""
    if option in _GROUPS:
        return _GROUPS[option], option
    key, sep, value = option.partition("=")
    if sep:
        key = _KEY_ALIASES.get(key, key)
        return (key if key in _GROUPS.values() else key + "="), value
    if option.startswith("no") and len(option) > 2:
        return option[2:], "off"
    return option, "on"


def dltune_mount_option_problem(value: Any, name: str) -> str:
    """One line naming ``name`` and the joined options when the list is refused, "" when accepted."""
    if isinstance(value, str):
        items = value.split(",")
    elif isinstance(value, Sequence):
        items = list(value)
    else:
        return f"{name}={_shown(value)} is refused: not a list of mount options"
    texts = [str(item) for item in items]
    joined = ",".join(texts)
    refused = f"{name}={_shown(joined)} is refused: "
    for item, text in zip(items, texts, strict=True):
        if not isinstance(item, str):
            return refused + f"{item!r} is not a string"
        if "," in text:
            return (
                refused
                + f"the item {text!r} holds a comma, so it is {text.count(',') + 1} options once joined"
            )
        if not text:
            return refused + "an empty option (an empty item or two commas in a row)"
        if not _OPTION.fullmatch(text):
            return refused + f"the option {text!r} has characters fstab does not take unquoted"
    seen: dict[str, tuple[str, str]] = {}
    for text in texts:
        setting, state = _setting(text)
        if setting in seen and seen[setting][0] != state:
            return (
                refused + f"{seen[setting][1]!r} and {text!r} contradict each other ({setting.rstrip('=')})"
            )
        seen.setdefault(setting, (state, text))
    return ""


def dltune_mount_option_errors(checks: Iterable[Mapping[str, Any]]) -> list[str]:
    """The refusals of a list of checks {name, value}: each value a list of mount options."""
    errors = []
    for check in checks:
        problem = dltune_mount_option_problem(check.get("value"), str(check.get("name", "?")))
        if problem:
            errors.append(problem)
    return errors


def dltune_unrecorded_errors(checks: Iterable[Mapping[str, Any]]) -> list[str]:
    """state=absent removes only what the role's record names: the refusals of a list of checks
    {name, value, recorded}, recorded being what the role's manifest recorded creating (a path or a
    list of them) for that variable."""
    errors = []
    for check in checks:
        recorded = check.get("recorded")
        known = [recorded] if isinstance(recorded, str) else list(recorded or [])
        if check.get("value") not in known:
            recorded_text = ", ".join(map(str, known)) or "nothing"
            errors.append(
                f"{check.get('name', '?')}={_shown(check.get('value'))} is refused: not what the role "
                f"recorded creating ({recorded_text}), so state=absent will not remove it"
            )
    return errors


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "dltune_path_problem": dltune_path_problem,
            "dltune_path_errors": dltune_path_errors,
            "dltune_mount_option_problem": dltune_mount_option_problem,
            "dltune_mount_option_errors": dltune_mount_option_errors,
            "dltune_unrecorded_errors": dltune_unrecorded_errors,
        }
