"""The snapshot: every fact the checks judge, as the probes read and parsed it from the host (or a
fixture tree). Plain immutable types and pure lookups over them, no I/O: `dltune.probes` builds a
Snapshot, `dltune.checks` judges one, and neither imports the other."""

from __future__ import annotations

import stat
from collections.abc import Mapping
from typing import Any, NamedTuple

from dltune.records import field, record


def option_value(options: tuple[str, ...], name: str) -> str | None:
    """Value of ``name=value`` in an option list (the last one wins, as in mount(8))."""
    value = None
    for opt in options:
        key, sep, val = opt.partition("=")
        if key == name and sep:
            value = val
    return value


class Mount(NamedTuple):
    """One line of mountinfo. A NamedTuple (immutable, like the other snapshot types) because hosts
    with many containers have tens of thousands of mounts, and a frozen dataclass is slow to build."""

    mount_point: str
    fstype: str
    source: str
    mount_options: tuple[str, ...]
    super_options: tuple[str, ...]
    device: str = ""  # major:minor of the filesystem: bind mounts of one filesystem share it

    @property
    def options(self) -> tuple[str, ...]:
        """Per-mount and superblock options together, as `findmnt -o OPTIONS` shows them."""
        return self.mount_options + tuple(o for o in self.super_options if o not in self.mount_options)


@record(frozen=True)
class FstabEntry:
    line_no: int
    spec: str
    mount_point: str
    fstype: str
    options: tuple[str, ...]
    freq: int
    passno: int


@record(frozen=True)
class UnparsedLine:
    """A line mount(8) could not use: reported by the audit, never dropped silently."""

    line_no: int
    text: str
    reason: str
    # An fstab line libmount still reads as an entry (mount -a and systemd's fstab generator see it),
    # though mount(8) cannot mount it: the mount point it stands for. None: libmount refuses the line.
    mount_point: str | None = None


@record(frozen=True)
class Fstab:
    entries: tuple[FstabEntry, ...] = ()
    unparsed: tuple[UnparsedLine, ...] = ()


def mount_at(mounts: tuple[Mount, ...], mount_point: str) -> Mount | None:
    """The mount that is visible at ``mount_point``: the last one mounted there."""
    found = None
    for mount in mounts:
        if mount.mount_point == mount_point:
            found = mount
    return found


def mount_containing(mounts: tuple[Mount, ...], path: str) -> Mount | None:
    """The mount whose filesystem holds ``path`` (the longest mount point that is a prefix of it)."""
    best = None
    for mount in mounts:
        prefix = mount.mount_point.rstrip("/") + "/"
        if (path == mount.mount_point or path.startswith(prefix) or mount.mount_point == "/") and (
            best is None or len(mount.mount_point) >= len(best.mount_point)
        ):
            best = mount
    return best


def fstab_entry_for(fstab: Fstab, mount_point: str) -> FstabEntry | None:
    """The fstab entry that mount(8) would use for ``mount_point`` (the last one wins)."""
    found = None
    for entry in fstab.entries:
        if entry.mount_point == mount_point:
            found = entry
    return found


@record(frozen=True)
class Transport:
    protocol: str  # tcp, udp, rdma
    source_port: int | None  # None where the protocol has no port field (rdma: 0)
    connects: int | None


@record(frozen=True)
class NfsMountStats:
    device: str
    mount_point: str
    fstype: str
    statvers: str | None
    options: dict[str, str] = field(default_factory=dict)
    age_seconds: int | None = None
    transports: tuple[Transport, ...] = ()


NFS_FSTYPES = ("nfs", "nfs4")


@record(frozen=True)
class RouteChoice:
    """What `ip route get VIP` says the kernel does for a packet to the VIP."""

    dev: str | None
    prefsrc: str | None
    error: str | None = None


@record(frozen=True)
class Responsiveness:
    ok: bool
    seconds: float
    detail: str


# Clock event reasons (nvml.h nvmlClocksEventReason*): what holds a GPU's clocks down.
IDLE = 0x1
APPLICATIONS_CLOCKS_SETTING = 0x2


SW_POWER_CAP = 0x4
HW_SLOWDOWN = 0x8


SYNC_BOOST = 0x10
SW_THERMAL = 0x20


HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80


DISPLAY_CLOCK = 0x100


REASON_NAMES = {
    IDLE: "idle",
    APPLICATIONS_CLOCKS_SETTING: "applications clocks setting",
    SW_POWER_CAP: "sw power cap",
    HW_SLOWDOWN: "hw slowdown",
    SYNC_BOOST: "sync boost",
    SW_THERMAL: "sw thermal slowdown",
    HW_THERMAL: "hw thermal slowdown",
    HW_POWER_BRAKE: "hw power brake",
    DISPLAY_CLOCK: "display clock",
}


@record(frozen=True)
class NvLink:
    """One NVLink of a GPU: whether it is active, and its error counters since the driver loaded
    (None: the driver does not count that kind here)."""

    link: int
    active: bool
    replay_errors: int | None = None
    recovery_errors: int | None = None
    crc_flit_errors: int | None = None
    crc_data_errors: int | None = None

    def counters(self) -> dict[str, int]:
        named = {
            "replay": self.replay_errors,
            "recovery": self.recovery_errors,
            "crc_flit": self.crc_flit_errors,
            "crc_data": self.crc_data_errors,
        }
        return {name: value for name, value in named.items() if value is not None}


@record(frozen=True)
class Gpu:
    index: int
    error: str | None = None  # a GPU that fell off the bus ("GPU is lost") keeps its slot
    # NVML refused this process the device (NVML_ERROR_NO_PERMISSION: a job's device cgroup): not lost.
    unreadable: str | None = None
    name: str | None = None
    uuid: str | None = None
    persistence: bool | None = None
    temperature_c: int | None = None
    slowdown_c: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    pcie_gen: int | None = None
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    clock_event_reasons: int | None = None
    ecc_uncorrected_volatile: int | None = None
    ecc_corrected_volatile: int | None = None  # since the driver loaded
    remapped_rows_pending: bool | None = None
    remapped_rows_failure: bool | None = None
    remapped_rows_corrected: int | None = None  # rows remapped for correctable / uncorrectable errors
    remapped_rows_uncorrected: int | None = None
    # Banks by spare rows left (nvmlDeviceGetRowRemapperHistogram): max, high, partial, low, none.
    remap_histogram: dict[str, int] | None = None
    # Page retirement (pre-Ampere GPUs): pages retired for multiple single-bit / double-bit errors.
    retired_pages_sbe: int | None = None
    retired_pages_dbe: int | None = None
    retired_pages_pending: bool | None = None
    utilization_percent: int | None = None
    power_default_limit_w: float | None = None
    # The reason mask again at the end of the window, and each counted reason's share of the window
    # (None where the driver has no clock-event counters).
    clock_event_reasons_later: int | None = None
    clock_event_share: dict[int, float] | None = None
    clock_window_s: float | None = None
    # Compute processes on the GPU (a job's, or one left behind); None: NVML could not say.
    compute_pids: tuple[int, ...] | None = None
    pci_bus_id: str | None = None  # "0000:3b:00.0", lower case, as sysfs names the device
    # Graphics application clock now and its default (nvidia-smi -ac sets it, -rac resets it), MHz.
    app_clock_mhz: int | None = None
    app_clock_default_mhz: int | None = None
    vbios_version: str | None = None
    inforom_image: str | None = None
    # NVML's GPU fabric registration on NVSwitch systems (r535+): state 0 not supported, 1 not started,
    # 2 in progress, 3 completed, and the status of a completed one (0: success); None: not offered.
    fabric_state: int | None = None
    fabric_status: int | None = None
    # The GPU's NVLinks as NVML answers per link; () where it has none (a PCIe card), None: not read.
    nvlinks: tuple[NvLink, ...] | None = None
    # Queries NVML answered with an error (not "not supported"): query -> NVML's words.
    nvml_errors: dict[str, str] | None = None


@record(frozen=True)
class NvmlState:
    available: bool
    error: str | None = None
    error_code: int | None = None
    driver_version: str | None = None
    gpus: tuple[Gpu, ...] = ()
    hung: bool = False  # NVML did not answer in time (a wedged GPU or driver)


UNKNOWN_DEVICE = "unknown"


@record(frozen=True)
class GpuEvent:
    device: str  # "0000:3b:00" (PCI domain:bus:device, lower case), or UNKNOWN_DEVICE
    # "xid" | "fallen_off_bus" | "init_failed" | "gsp_timeout" | "not_brought_up" | "no_gpu_found" | "sxid"
    kind: str
    line: str
    xid: int | None = None  # the Xid, or an NVSwitch's SXid
    severity_word: str | None = (
        None  # "Fatal"/"Nonfatal" (NVLink Xid), "Fatal"/"Non-fatal"/"Correctable" (SXid)
    )
    recovery_action: int | None = None  # Xid 154: the action the driver now asks for (0 = none)
    recovery_action_name: str | None = None


@record(frozen=True)
class NvrmLog:
    events: tuple[GpuEvent, ...]  # the GPUs' events of the driver's current load
    driver_loads: int  # "loading NVIDIA UNIX" lines seen
    dropped_before_load: int  # events of earlier loads (counted, not judged)
    switch_events: tuple[GpuEvent, ...] = ()  # NVSwitch SXids of the current load


@record(frozen=True)
class Package:
    name: str
    version: str
    held: bool


@record(frozen=True)
class AerLogDevice:
    """One PCI function's AER errors in the kernel log of the current boot (probes/aer_log.py), counted
    as the kernel counts them in sysfs: one per error it printed for the function ("PCIe Bus Error:
    severity=..."), the error bits it named by severity (``correctable:Timeout``), with the driver and
    the ``[vendor:device]`` the log printed for it and its first lines."""

    address: str  # "0000:07:00.0"
    counts: AerCounts
    driver: str | None = None  # "nvidia", "pcieport", "mlx5_core"
    pci_id: str | None = None  # "10de:2184"
    lines: tuple[str, ...] = ()


@record(frozen=True)
class AerLog:
    """The kernel log's PCIe AER errors per function, of the current boot only."""

    devices: tuple[AerLogDevice, ...] = ()
    # The kernel's AER service shows in the current boot ("AER: enabled with IRQ", the firmware granting
    # the OS control of AER, or an error it handled): a function without errors then had none it saw.
    service: bool = False
    boots: int = 0  # boot banners in the text ("Linux version ...", journalctl's "-- Boot ... --")
    earlier_boot_errors: int = 0  # errors before the last banner: counted, not judged
    unreadable_lines: int = 0  # AER lines in no form the probe knows (judged: none of them)


@record(frozen=True)
class KernelLog:
    text: str | None
    error: str | None = None  # why it could not be read (e.g. needs root)

    # The NVIDIA driver's GPU events since it last loaded, parsed by the probe.
    nvrm: NvrmLog = field(default_factory=lambda: NvrmLog((), 0, 0))
    # PCIe AER errors the kernel printed in the current boot, parsed by the probe.
    aer: AerLog = field(default_factory=AerLog)


@record(frozen=True)
class PathInfo:
    """lstat facts of a path (never followed: a link is reported as a link)."""

    exists: bool
    is_link: bool = False
    is_dir: bool = False
    is_file: bool = False
    uid: int | None = None
    mode: int | None = None  # permission bits
    fstype: str = "unknown"
    free_bytes: int | None = None
    statfs_error: str | None = None  # statfs did not answer (a dead network filesystem) or failed

    @property
    def writable_by_others(self) -> bool:
        return self.mode is not None and bool(self.mode & (stat.S_IWGRP | stat.S_IWOTH))


@record(frozen=True)
class StatFs:
    total_bytes: int
    free_bytes: int
    total_inodes: int
    free_inodes: int


# Filesystems that hold data on local block devices; the audit advises noatime on these.
DATA_FSTYPES = frozenset({"ext4", "ext3", "xfs", "btrfs", "f2fs"})


# Mount points that belong to the OS, not to data (the role's data_disks_system_noatime covers them).
SYSTEM_MOUNT_POINTS = frozenset({"/", "/boot", "/boot/efi", "/usr", "/var", "/var/log"})


# Space and inodes of a filesystem: what statfs answered (one type for the probe and the checks).
SpaceInfo = StatFs


def looks_like_data_mount(mount: Mount) -> bool:
    return (
        mount.fstype in DATA_FSTYPES
        and mount.source.startswith("/dev/")
        and mount.mount_point not in SYSTEM_MOUNT_POINTS
        and not mount.mount_point.startswith(("/snap/", "/var/lib/docker", "/boot/"))
    )


MANIFEST_DIR = "/etc/dltune/expected.d"


@record(frozen=True)
class SlurmJobs:
    """The jobs Slurm runs on this node, as `squeue --nodelist` answered; `error` says why it could
    not answer (`installed` False: no Slurm client here at all)."""

    job_ids: tuple[str, ...] = ()
    error: str | None = None
    installed: bool = True
    node: str = ""


@record(frozen=True)
class CpuFrequency:
    """cpufreq's per-CPU choices: how many CPUs run each governor, and each energy-performance
    preference (intel_pstate/amd-pstate in active mode) with the governor it goes with."""

    driver: str | None
    governors: Mapping[str, int]
    # (governor, preference) -> CPUs; preference "" where the driver has none
    settings: Mapping[tuple[str, str], int]


@record(frozen=True)
class TimeSync:
    """Whether the kernel's clock is synchronised (timedatectl's NTPSynchronized: any NTP client sets
    it), or the container whose clock is its host's, or why neither could be told."""

    synchronized: bool | None = None
    container: str | None = None
    source: str = ""
    error: str | None = None


@record(frozen=True)
class AerCounts:
    """A PCIe device's Advanced Error Reporting totals since boot (sysfs aer_dev_*; None: that file
    is absent), and the named counters that are not zero."""

    fatal: int | None
    nonfatal: int | None
    correctable: int | None
    nonzero: Mapping[str, int] = field(default_factory=dict)


@record(frozen=True)
class PciDevice:
    """A GPU, NVSwitch or RDMA adapter on the PCI bus, as sysfs describes it."""

    address: str  # "0000:3b:00.0"
    kind: str  # "gpu" | "nvswitch" | "hca"
    vendor: str
    device_class: str
    aer: AerCounts | None = None  # None: the kernel keeps no AER statistics for it
    link_width: int | None = None
    link_width_max: int | None = None
    link_speed: str | None = None  # "16.0 GT/s PCIe"
    link_speed_max: str | None = None
    # Where it sits: its host bridge ("pci0000:00"), the bridges above it (root port first), the
    # most the port above it (its slot) supports, and its NUMA node (None: the firmware did not say).
    host_bridge: str | None = None
    bridges: tuple[str, ...] = ()
    upstream_width_max: int | None = None
    upstream_speed_max: str | None = None
    numa_node: int | None = None


@record(frozen=True)
class IbPort:
    """One port of an RDMA device (/sys/class/infiniband/<device>/ports/<port>): InfiniBand or RoCE."""

    device: str
    port: int
    state: str  # "ACTIVE", "DOWN", "INIT", "ARMED" (the name, without sysfs's number)
    phys_state: str  # "LinkUp", "Polling", "Disabled", ...
    rate_gbps: float | None = None
    width: str | None = None  # "4X"
    link_layer: str = "InfiniBand"  # or "Ethernet" (RoCE)
    counters: Mapping[str, int] = field(default_factory=dict)
    pci_address: str | None = None

    @property
    def name(self) -> str:
        return f"{self.device}/{self.port}"

    @property
    def linked(self) -> bool:
        return self.state == "ACTIVE" and self.phys_state == "LinkUp"


@record(frozen=True)
class Fabric:
    """The node's interconnects as sysfs and /proc show them: GPUs, NVSwitches and RDMA adapters on
    the PCI bus, RDMA ports, IPoIB interfaces, and whether Fabric Manager runs."""

    pci: tuple[PciDevice, ...] = ()
    ib_ports: tuple[IbPort, ...] = ()
    ib_error: str | None = None  # the RDMA ports could not be read (late, or unreadable)
    # interface -> operstate ("up", "down"; "absent" where no such interface exists)
    ipoib: Mapping[str, str] = field(default_factory=dict)
    fabric_manager_running: bool | None = None  # None: not looked for
    kernel_release: str | None = None
    open_kernel_module: bool | None = None  # the NVIDIA module is the open one (DMA-BUF capable)
    # GPUDirect RDMA expected: the ACS Control register of each bridge above a GPU or adapter (None:
    # not readable, as a user; -1: no ACS capability), and the locked-memory limit jobs get (bytes,
    # -1 unlimited, None unread) with whose limit it is.
    acs: Mapping[str, int | None] = field(default_factory=dict)
    memlock_bytes: int | None = None
    memlock_source: str = "not read"
    nics: Mapping[str, str] = field(default_factory=dict)  # RDMA device (mlx5_0) -> its PCI function


@record(frozen=True)
class DcgmTest:
    """One test of a DCGM diagnostic: its worst status ("pass", "warn", "fail", "skip", or
    "unknown" for a word the parser does not know), per GPU, and DCGM's own words."""

    name: str
    status: str
    per_gpu: Mapping[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()


@record(frozen=True)
class DcgmGpu:
    """One GPU of `dcgmi discovery -l`, as DCGM names it: its GPU ID, name, PCI bus id (in NVML's
    form, "0000:4c:00.0", where it reads as one; else as printed) and UUID. A value DCGM could not
    fill is its blank marker ("<<<NULL>>>", NVIDIA/DCGM#229); None: the row has no such line."""

    gpu_id: int
    name: str | None = None
    pci_bus_id: str | None = None
    uuid: str | None = None
    said: tuple[str, ...] = ()  # the row's other lines ("Error: Cannot get device attributes for GPU.")


@record(frozen=True)
class DcgmDiscovery:
    """`dcgmi discovery -l`: the GPUs DCGM sees, or why they could not be read."""

    command: str
    gpus: tuple[DcgmGpu, ...] = ()
    note: str | None = None  # DCGM 4.5+: "Note: Use -a flag to show all GPUs, ... not active."
    messages: tuple[str, ...] = ()  # DCGM's "Error: ..." lines outside the GPU table
    returncode: int | None = None
    timed_out: bool = False
    error: str | None = None


@record(frozen=True)
class DcgmDiag:
    """A `dcgmi diag` run: its tests, or why there are none (not installed, no answer in time,
    output that is no diagnostic); and the GPUs DCGM listed after it (None: not listed)."""

    level: int
    command: str
    installed: bool = True
    timed_out: bool = False
    returncode: int | None = None
    tests: tuple[DcgmTest, ...] = ()
    version: str | None = None
    error: str | None = None
    discovery: DcgmDiscovery | None = None


@record(frozen=True)
class NvmeHealth:
    """An NVMe controller's SMART / Health log, as far as it was read."""

    controller: str  # "/dev/nvme0"
    mount_points: tuple[str, ...]  # the data mounts on it
    figures: Mapping[str, int] = field(default_factory=dict)  # critical_warning, media_errors, ...
    tool: str | None = None  # "nvme" or "smartctl"
    error: str | None = None  # why it was not read


UNATTRIBUTED_MEMORY = "unknown"  # MemoryController.name of machine checks no EDAC line attributes


@record(frozen=True)
class MemoryController:
    name: str  # "mc0", or "unknown" for machine checks no EDAC line attributes
    driver: str | None  # EDAC's mc_name ("Skylake Socket#0 IMC#0")
    corrected: int | None  # since boot; None: not readable
    uncorrected: int | None
    source: str  # "sysfs", "kernel log", or both
    # The kernel said the uncorrected error was fatal or in memory ("unknown" only: a bank's status
    # alone may be a cache or PCIe bank, or a leftover the firmware reports at every boot).
    fatal: bool = False


@record(frozen=True)
class MemoryErrors:
    edac: bool = False  # an EDAC driver exposes counters
    kernel_log_read: bool = False
    controllers: tuple[MemoryController, ...] = ()


@record(frozen=True)
class RebootState:
    required: bool
    packages: tuple[str, ...] = ()


@record(frozen=True)
class Snapshot:
    """Everything the checks judge, read once from the host (or a fixture tree)."""

    root: str
    mounts: tuple[Mount, ...] = ()
    mountinfo_unparsed: tuple[UnparsedLine, ...] = ()
    fstab: Fstab = field(default_factory=Fstab)
    mem_total_kb: int | None = None
    reboot: RebootState = RebootState(required=False)
    time_sync: TimeSync = field(default_factory=lambda: TimeSync(error="not probed"))
    cpu_frequency: CpuFrequency | None = None  # None: no cpufreq here (a VM, a container, the BIOS)
    memory_errors: MemoryErrors = field(default_factory=MemoryErrors)
    expected: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    manifest_dir: str = MANIFEST_DIR
    # role -> why its fragment cannot be used (unreadable, not JSON, wrong shape); "*": the directory
    manifest_problems: Mapping[str, str] = field(default_factory=dict)
    # The tuning ledger's entries (dltune.costs.ledger: what each role changed, measured before and after),
    # and the files that could not be used.
    ledger: tuple[Mapping[str, Any], ...] = ()
    ledger_problems: Mapping[str, str] = field(default_factory=dict)
    # UUID -> device path; None: looked up and not found; missing key: could not look it up.
    uuid_devices: Mapping[str, str | None] = field(default_factory=dict)
    # A device path as named (a data mount's source, a UUID's device) -> the device it resolves to,
    # symlinks followed under the audited root; missing: it could not be resolved.
    device_paths: Mapping[str, str] = field(default_factory=dict)
    space: Mapping[str, SpaceInfo] = field(default_factory=dict)
    nvme: tuple[NvmeHealth, ...] = ()  # the data disks' NVMe controllers (storage area)
    nvml: NvmlState = field(default_factory=lambda: NvmlState(available=False, error="not probed"))
    nvidia_module_version: str | None = None  # from /proc/driver/nvidia/version
    kernel_modules: frozenset[str] = frozenset()
    # Installed NVIDIA driver packages (None: no dpkg database here).
    driver_packages: tuple[Package, ...] | None = None
    # VIP -> what `ip route get` chose (network area, for the VIPs the nfs_multivip manifest lists)
    vip_routes: Mapping[str, RouteChoice] = field(default_factory=dict)
    # NFS mount point -> whether statfs answered within the timeout (nfs area)
    nfs_responsive: Mapping[str, Responsiveness] = field(default_factory=dict)
    # NFS mount point -> its options and RPC transport(s), from /proc/self/mountstats (nfs area)
    nfs_stats: Mapping[str, NfsMountStats] = field(default_factory=dict)
    kernel_log: KernelLog = field(default_factory=lambda: KernelLog(None, "not probed"))
    fabric: Fabric = field(default_factory=Fabric)
    dcgm: DcgmDiag | None = None  # None: no DCGM diagnostic was asked for (--dcgm)
    # counter values of the previous audit (--previous, or the --facts-file being replaced), by
    # "<check id>|<subject>": what rose since then is judged, not only what is high
    previous: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    # Asked only when a GPU runs compute processes: whose are they (None: not asked)
    slurm_jobs: SlurmJobs | None = None
    # env/staging: the audit's own environment (job variables only), its uid, lstat facts of
    # $SLURM_TMPDIR, the scratch base and the hooks by path.
    environ: Mapping[str, str] = field(default_factory=dict)
    uid: int = 0
    # dl_env's files by path, parsed: NAME -> value as each kind writes it (missing: unreadable)
    env_values: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    # slurm.conf by path, parsed: lower-cased key -> value (missing: unreadable)
    slurm_conf: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    paths: Mapping[str, PathInfo] = field(default_factory=dict)
    errors: Mapping[str, str] = field(default_factory=dict)
    # probe -> what the audit's --timeout cut short (system.audit_timeout names them)
    missed: Mapping[str, str] = field(default_factory=dict)
