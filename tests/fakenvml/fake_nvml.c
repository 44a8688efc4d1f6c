/*
 * A fake libnvidia-ml.so.1 for tests: the real pynvml code path runs against it, loaded through the
 * library path (LD_LIBRARY_PATH). Its answers come from the scenario file named by
 * DLTUNE_FAKE_NVML_SCENARIO (key=value lines, see tests/fixtures/nvml/README.md), or else from
 * /etc/dltune-lab/nvml-scenario.conf (the lab's GPU-node stand-ins carry one). Only the entry
 * points dltune's NVML probe uses exist; anything else is "function not found", as with an old driver.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MAX_GPUS 16
enum { OK = 0, UNINIT = 1, INVALID = 2, NOT_SUPPORTED = 3, NO_PERMISSION = 4, NOT_FOUND = 6, INSUFFICIENT = 7,
       GPU_LOST = 15, UNKNOWN = 999 };
/* nvml.h field ids dltune reads, and the value types of nvmlFieldValue_t */
enum { FI_POWER_INSTANT = 186, FI_EVENT_SW_POWER_CAP = 74, FI_EVENT_SYNC_BOOST = 76, FI_EVENT_SW_THERMAL = 269,
       FI_EVENT_HW_THERMAL = 270, FI_EVENT_HW_POWER_BRAKE = 271 };
enum { VALUE_UINT = 1, VALUE_ULL = 3 };

typedef struct {
    char name[96], uuid[96], unsupported[512], failing[512];
    int lost, persistence, hang, no_permission, unknown_error;
    unsigned processes; /* compute processes running on the GPU (pids 4000 + n) */
    unsigned temp, temp_slowdown, power_mw, power_limit_mw, power_default_mw, power_instant_mw, util;
    unsigned long long energy_base_mj, throttle_after;
    unsigned throttle_reads, mask_reads;
    /* Share of wall time (0..1) each clock-event counter advances by: the counters NVML keeps in ns. */
    double share_sw_power, share_sync_boost, share_sw_thermal, share_hw_thermal, share_hw_brake;
    unsigned pcie_gen, pcie_gen_max, pcie_width, pcie_width_max;
    unsigned long long throttle, ecc_uncorrected, ecc_corrected;
    unsigned remap_corr, remap_unc, remap_pending, remap_failure;
    /* NVLink: links the GPU has (0: a PCIe card), which are down (",2,5," style list), and the error
     * counters every link reports */
    unsigned nvlinks;
    char nvlink_down[128];
    unsigned long long nvlink_replay, nvlink_recovery, nvlink_crc_flit, nvlink_crc_data;
    char pci_bus_id[32], vbios[32], inforom[32];
    unsigned app_clock_mhz, app_clock_default_mhz; /* graphics application clock, MHz */
    int fabric_state;                               /* -1: the driver has no fabric info (NotSupported) */
    unsigned fabric_status;
} gpu_t;

static gpu_t gpus[MAX_GPUS];
static unsigned gpu_count;
static int init_error, hang_init;
static struct timespec loaded_at;

static double seconds_since_init(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)(now.tv_sec - loaded_at.tv_sec) + (double)(now.tv_nsec - loaded_at.tv_nsec) / 1e9;
}

/* A wedged GPU or driver: the call never returns, and SIGTERM does not end it (only SIGKILL does,
 * as with a task in the kernel that the audit must abandon). */
static void hang(void) {
    signal(SIGTERM, SIG_IGN);
    for (;;) pause();
}
static char driver_version[80] = "580.95.05";

static void set_field(gpu_t *g, const char *key, const char *val) {
    unsigned long long n = strtoull(val, NULL, 0);
    if (!strcmp(key, "name")) snprintf(g->name, sizeof g->name, "%s", val);
    else if (!strcmp(key, "uuid")) snprintf(g->uuid, sizeof g->uuid, "%s", val);
    else if (!strcmp(key, "unsupported")) snprintf(g->unsupported, sizeof g->unsupported, ",%s,", val);
    else if (!strcmp(key, "failing")) snprintf(g->failing, sizeof g->failing, ",%s,", val);
    else if (!strcmp(key, "unknown_error")) g->unknown_error = (int)n;
    else if (!strcmp(key, "lost")) g->lost = (int)n;
    else if (!strcmp(key, "persistence")) g->persistence = (int)n;
    else if (!strcmp(key, "hang")) g->hang = (int)n;
    else if (!strcmp(key, "no_permission")) g->no_permission = (int)n;
    else if (!strcmp(key, "power_default_mw")) g->power_default_mw = (unsigned)n;
    else if (!strcmp(key, "power_instant_mw")) g->power_instant_mw = (unsigned)n;
    else if (!strcmp(key, "util")) g->util = (unsigned)n;
    else if (!strcmp(key, "processes")) g->processes = (unsigned)n;
    else if (!strcmp(key, "energy_base_mj")) g->energy_base_mj = n;
    else if (!strcmp(key, "throttle_reads")) g->throttle_reads = (unsigned)n;
    else if (!strcmp(key, "throttle_after")) g->throttle_after = n;
    else if (!strcmp(key, "share_sw_power")) g->share_sw_power = strtod(val, NULL);
    else if (!strcmp(key, "share_sync_boost")) g->share_sync_boost = strtod(val, NULL);
    else if (!strcmp(key, "share_sw_thermal")) g->share_sw_thermal = strtod(val, NULL);
    else if (!strcmp(key, "share_hw_thermal")) g->share_hw_thermal = strtod(val, NULL);
    else if (!strcmp(key, "share_hw_brake")) g->share_hw_brake = strtod(val, NULL);
    else if (!strcmp(key, "temp")) g->temp = (unsigned)n;
    else if (!strcmp(key, "temp_slowdown")) g->temp_slowdown = (unsigned)n;
    else if (!strcmp(key, "power_mw")) g->power_mw = (unsigned)n;
    else if (!strcmp(key, "power_limit_mw")) g->power_limit_mw = (unsigned)n;
    else if (!strcmp(key, "pcie_gen")) g->pcie_gen = (unsigned)n;
    else if (!strcmp(key, "pcie_gen_max")) g->pcie_gen_max = (unsigned)n;
    else if (!strcmp(key, "pcie_width")) g->pcie_width = (unsigned)n;
    else if (!strcmp(key, "pcie_width_max")) g->pcie_width_max = (unsigned)n;
    else if (!strcmp(key, "throttle")) g->throttle = n;
    else if (!strcmp(key, "ecc_uncorrected")) g->ecc_uncorrected = n;
    else if (!strcmp(key, "ecc_corrected")) g->ecc_corrected = n;
    else if (!strcmp(key, "remap_pending")) g->remap_pending = (unsigned)n;
    else if (!strcmp(key, "remap_failure")) g->remap_failure = (unsigned)n;
    else if (!strcmp(key, "remap_unc")) g->remap_unc = (unsigned)n;
    else if (!strcmp(key, "nvlinks")) g->nvlinks = (unsigned)n;
    else if (!strcmp(key, "nvlink_down")) snprintf(g->nvlink_down, sizeof g->nvlink_down, ",%s,", val);
    else if (!strcmp(key, "nvlink_replay")) g->nvlink_replay = n;
    else if (!strcmp(key, "nvlink_recovery")) g->nvlink_recovery = n;
    else if (!strcmp(key, "nvlink_crc_flit")) g->nvlink_crc_flit = n;
    else if (!strcmp(key, "nvlink_crc_data")) g->nvlink_crc_data = n;
    else if (!strcmp(key, "pci_bus_id")) snprintf(g->pci_bus_id, sizeof g->pci_bus_id, "%s", val);
    else if (!strcmp(key, "vbios")) snprintf(g->vbios, sizeof g->vbios, "%s", val);
    else if (!strcmp(key, "inforom")) snprintf(g->inforom, sizeof g->inforom, "%s", val);
    else if (!strcmp(key, "app_clock_mhz")) g->app_clock_mhz = (unsigned)n;
    else if (!strcmp(key, "app_clock_default_mhz")) g->app_clock_default_mhz = (unsigned)n;
    else if (!strcmp(key, "fabric_state")) g->fabric_state = atoi(val);
    else if (!strcmp(key, "fabric_status")) g->fabric_status = (unsigned)n;
    else fprintf(stderr, "fake-nvml: unknown key %s\n", key);
}

static void defaults(void) {
    for (unsigned i = 0; i < MAX_GPUS; i++) {
        gpu_t *g = &gpus[i];
        memset(g, 0, sizeof *g);
        snprintf(g->name, sizeof g->name, "NVIDIA H100 80GB HBM3");
        snprintf(g->uuid, sizeof g->uuid, "GPU-00000000-0000-0000-0000-%012u", i);
        g->persistence = 1;
        g->temp = 35; g->temp_slowdown = 87;
        g->power_mw = 70000; g->power_limit_mw = 700000;
        g->pcie_gen = 5; g->pcie_gen_max = 5; g->pcie_width = 16; g->pcie_width_max = 16;
        g->throttle = 0x1; /* idle */
        /* as nvidia-smi prints them: an 8-digit domain, upper-case hex */
        snprintf(g->pci_bus_id, sizeof g->pci_bus_id, "00000000:%02X:00.0", 0x18 + 0x10 * i);
        snprintf(g->vbios, sizeof g->vbios, "96.00.99.00.01");
        snprintf(g->inforom, sizeof g->inforom, "G520.0200.00.05");
        g->app_clock_mhz = 1980; g->app_clock_default_mhz = 1980;
        g->fabric_state = -1;
    }
}

static void load_scenario(void) {
    const char *path = getenv("DLTUNE_FAKE_NVML_SCENARIO");
    char line[512];
    defaults();
    gpu_count = 0;
    init_error = 0;
    hang_init = 0;
    if (!path) path = "/etc/dltune-lab/nvml-scenario.conf";
    FILE *f = fopen(path, "r");
    if (!f) { init_error = UNINIT; return; }
    while (fgets(line, sizeof line, f)) {
        char *eq = strchr(line, '='), *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        if (line[0] == '#' || !eq) continue;
        *eq = 0;
        const char *key = line, *val = eq + 1;
        if (!strcmp(key, "init_error")) init_error = atoi(val);
        else if (!strcmp(key, "hang_init")) hang_init = atoi(val);
        else if (!strcmp(key, "driver_version")) snprintf(driver_version, sizeof driver_version, "%s", val);
        else if (!strcmp(key, "gpus")) gpu_count = (unsigned)atoi(val) > MAX_GPUS ? MAX_GPUS : (unsigned)atoi(val);
        else if (!strncmp(key, "gpu*.", 5)) {
            for (unsigned i = 0; i < MAX_GPUS; i++) set_field(&gpus[i], key + 5, val);
        } else if (!strncmp(key, "gpu", 3)) {
            char *dot = strchr(key, '.');
            unsigned idx = (unsigned)atoi(key + 3);
            if (dot && idx < MAX_GPUS) set_field(&gpus[idx], dot + 1, val);
        }
    }
    fclose(f);
}

static int listed(const char *list, const char *field) {
    char needle[64];
    snprintf(needle, sizeof needle, ",%s,", field);
    return strstr(list, needle) != NULL;
}
static int unsupported(const gpu_t *g, const char *field) { return listed(g->unsupported, field); }

#define DEVICE_GUARD(dev, field)                  \
    const gpu_t *g = (const gpu_t *)(dev);        \
    if (!g) return INVALID;                       \
    if (g->hang) hang();                          \
    if (g->lost) return GPU_LOST;                 \
    if (g->unknown_error || listed(g->failing, field)) return UNKNOWN; \
    if (unsupported(g, field)) return NOT_SUPPORTED;

int nvmlInitWithFlags(unsigned flags) {
    (void)flags;
    load_scenario();
    clock_gettime(CLOCK_MONOTONIC, &loaded_at);
    if (hang_init) hang();
    return init_error;
}
int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
int nvmlShutdown(void) { return OK; }

const char *nvmlErrorString(int result) {
    switch (result) {
    case OK: return "Success";
    case UNINIT: return "Uninitialized";
    case NOT_SUPPORTED: return "Not Supported";
    case 9: return "Driver Not Loaded";
    case NO_PERMISSION: return "Insufficient Permissions";
    case NOT_FOUND: return "Not Found";
    case GPU_LOST: return "GPU is lost";
    case 18: return "RM has detected an NVML/RM version mismatch.";
    default: return "Unknown Error";
    }
}

int nvmlSystemGetDriverVersion(char *buf, unsigned len) {
    if (strlen(driver_version) + 1 > len) return INSUFFICIENT;
    strcpy(buf, driver_version);
    return OK;
}

int nvmlDeviceGetCount_v2(unsigned *count) { *count = gpu_count; return OK; }

int nvmlDeviceGetHandleByIndex_v2(unsigned index, void **device) {
    if (index >= gpu_count) return INVALID;
    /* A device the process may not open (a job's device cgroup) gives no handle at all. */
    if (gpus[index].no_permission) return NO_PERMISSION;
    *device = &gpus[index];
    return gpus[index].lost ? GPU_LOST : OK;
}

/* NVML ignores CUDA_VISIBLE_DEVICES: a UUID is the one name both sides agree on. */
int nvmlDeviceGetHandleByUUID(const char *uuid, void **device) {
    for (unsigned i = 0; i < gpu_count; i++) {
        if (strcmp(gpus[i].uuid, uuid)) continue;
        if (gpus[i].no_permission) return NO_PERMISSION;
        *device = &gpus[i];
        return gpus[i].lost ? GPU_LOST : OK;
    }
    return NOT_FOUND;
}

int nvmlDeviceGetName(void *dev, char *buf, unsigned len) {
    DEVICE_GUARD(dev, "name");
    snprintf(buf, len, "%s", g->name);
    return OK;
}

int nvmlDeviceGetUUID(void *dev, char *buf, unsigned len) {
    DEVICE_GUARD(dev, "uuid");
    snprintf(buf, len, "%s", g->uuid);
    return OK;
}

int nvmlDeviceGetPersistenceMode(void *dev, int *mode) { DEVICE_GUARD(dev, "persistence"); *mode = g->persistence; return OK; }
int nvmlDeviceGetTemperature(void *dev, int sensor, unsigned *t) { (void)sensor; DEVICE_GUARD(dev, "temp"); *t = g->temp; return OK; }
int nvmlDeviceGetTemperatureThreshold(void *dev, int which, unsigned *t) {
    (void)which; DEVICE_GUARD(dev, "temp_slowdown"); *t = g->temp_slowdown; return OK;
}
int nvmlDeviceGetPowerUsage(void *dev, unsigned *mw) { DEVICE_GUARD(dev, "power"); *mw = g->power_mw; return OK; }
int nvmlDeviceGetEnforcedPowerLimit(void *dev, unsigned *mw) { DEVICE_GUARD(dev, "power"); *mw = g->power_limit_mw; return OK; }
int nvmlDeviceGetCurrPcieLinkGeneration(void *dev, unsigned *v) { DEVICE_GUARD(dev, "pcie"); *v = g->pcie_gen; return OK; }
int nvmlDeviceGetMaxPcieLinkGeneration(void *dev, unsigned *v) { DEVICE_GUARD(dev, "pcie"); *v = g->pcie_gen_max; return OK; }
int nvmlDeviceGetCurrPcieLinkWidth(void *dev, unsigned *v) { DEVICE_GUARD(dev, "pcie"); *v = g->pcie_width; return OK; }
int nvmlDeviceGetMaxPcieLinkWidth(void *dev, unsigned *v) { DEVICE_GUARD(dev, "pcie"); *v = g->pcie_width_max; return OK; }
int nvmlDeviceGetCurrentClocksEventReasons(void *dev, unsigned long long *r) {
    DEVICE_GUARD(dev, "throttle");
    gpu_t *mutable = (gpu_t *)dev;
    /* throttle_reads=N: the mask holds for N reads, then throttle_after (a transient event). */
    *r = (g->throttle_reads && mutable->mask_reads >= g->throttle_reads) ? g->throttle_after : g->throttle;
    mutable->mask_reads++;
    return OK;
}
int nvmlDeviceGetCurrentClocksThrottleReasons(void *dev, unsigned long long *r) { return nvmlDeviceGetCurrentClocksEventReasons(dev, r); }

int nvmlDeviceGetTotalEccErrors(void *dev, int error_type, int counter_type, unsigned long long *count) {
    (void)counter_type;
    DEVICE_GUARD(dev, "ecc");
    *count = error_type == 1 ? g->ecc_uncorrected : g->ecc_corrected;
    return OK;
}

int nvmlDeviceGetRemappedRows(void *dev, unsigned *corr, unsigned *unc, unsigned *pending, unsigned *failure) {
    DEVICE_GUARD(dev, "remap");
    *corr = g->remap_corr; *unc = g->remap_unc; *pending = g->remap_pending; *failure = g->remap_failure;
    return OK;
}

int nvmlDeviceGetPowerManagementDefaultLimit(void *dev, unsigned *mw) {
    DEVICE_GUARD(dev, "power");
    *mw = g->power_default_mw ? g->power_default_mw : g->power_limit_mw;
    return OK;
}

typedef struct { unsigned gpu, memory; } utilization_t;
int nvmlDeviceGetUtilizationRates(void *dev, utilization_t *u) {
    DEVICE_GUARD(dev, "util");
    u->gpu = g->util; u->memory = 0;
    return OK;
}

/* Energy since the driver loaded, in mJ: it advances at the GPU's power draw. */
int nvmlDeviceGetTotalEnergyConsumption(void *dev, unsigned long long *mj) {
    DEVICE_GUARD(dev, "energy");
    *mj = g->energy_base_mj + (unsigned long long)(g->power_mw * seconds_since_init());
    return OK;
}

typedef struct { unsigned pid; unsigned long long used_memory; unsigned gpu_instance, compute_instance; } process_t;
/* nvmlDeviceGetComputeRunningProcesses_v3: the count first (INSUFFICIENT_SIZE), then the list. */
int nvmlDeviceGetComputeRunningProcesses_v3(void *dev, unsigned *count, process_t *infos) {
    DEVICE_GUARD(dev, "processes");
    if (g->processes == 0) { *count = 0; return OK; }
    if (infos == NULL || *count < g->processes) { *count = g->processes; return INSUFFICIENT; }
    for (unsigned i = 0; i < g->processes; i++) {
        infos[i].pid = 4000 + i; infos[i].used_memory = 1ULL << 30;
        infos[i].gpu_instance = infos[i].compute_instance = 0xFFFFFFFF;
    }
    *count = g->processes;
    return OK;
}

typedef struct {
    unsigned field_id, scope_id;
    long long timestamp, latency_usec;
    unsigned value_type, nvml_return;
    union { double d; unsigned ui; unsigned long ul; unsigned long long ull; long long sll; int si; } value;
} field_value_t;

int nvmlDeviceGetFieldValues(void *dev, int count, field_value_t *values) {
    DEVICE_GUARD(dev, "fields");
    double elapsed_ns = seconds_since_init() * 1e9;
    for (int i = 0; i < count; i++) {
        field_value_t *v = &values[i];
        double share = -1;
        v->nvml_return = OK;
        v->value_type = VALUE_ULL;
        switch (v->field_id) {
        case FI_POWER_INSTANT:
            if (unsupported(g, "power_instant")) { v->nvml_return = NOT_SUPPORTED; continue; }
            v->value_type = VALUE_UINT;
            v->value.ui = g->power_instant_mw ? g->power_instant_mw : g->power_mw;
            continue;
        case FI_EVENT_SW_POWER_CAP: share = g->share_sw_power; break;
        case FI_EVENT_SYNC_BOOST: share = g->share_sync_boost; break;
        case FI_EVENT_SW_THERMAL: share = g->share_sw_thermal; break;
        case FI_EVENT_HW_THERMAL: share = g->share_hw_thermal; break;
        case FI_EVENT_HW_POWER_BRAKE: share = g->share_hw_brake; break;
        default: v->nvml_return = NOT_SUPPORTED; continue;
        }
        if (unsupported(g, "event_counters")) { v->nvml_return = NOT_SUPPORTED; continue; }
        v->value.ull = (unsigned long long)(share * elapsed_ns);
    }
    return OK;
}

/* nvmlPciInfo_t as nvml.h (v3) lays it out */
typedef struct {
    char bus_id_legacy[16];
    unsigned domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
} pci_info_t;

int nvmlDeviceGetPciInfo_v3(void *dev, pci_info_t *info) {
    DEVICE_GUARD(dev, "pci");
    memset(info, 0, sizeof *info);
    snprintf(info->bus_id, sizeof info->bus_id, "%s", g->pci_bus_id);
    snprintf(info->bus_id_legacy, sizeof info->bus_id_legacy, "%.15s", g->pci_bus_id + 4);
    info->pci_device_id = 0x233010de;
    return OK;
}

int nvmlDeviceGetVbiosVersion(void *dev, char *buf, unsigned len) {
    DEVICE_GUARD(dev, "vbios");
    if (strlen(g->vbios) + 1 > len) return INSUFFICIENT;
    snprintf(buf, len, "%s", g->vbios);
    return OK;
}

int nvmlDeviceGetInforomImageVersion(void *dev, char *buf, unsigned len) {
    DEVICE_GUARD(dev, "inforom");
    if (strlen(g->inforom) + 1 > len) return INSUFFICIENT;
    snprintf(buf, len, "%s", g->inforom);
    return OK;
}

/* A link beyond the GPU's count answers NotSupported, as on a PCIe card for every link. */
int nvmlDeviceGetNvLinkState(void *dev, unsigned link, unsigned *active) {
    DEVICE_GUARD(dev, "nvlink");
    char needle[16];
    if (link >= g->nvlinks) return NOT_SUPPORTED;
    snprintf(needle, sizeof needle, ",%u,", link);
    *active = strstr(g->nvlink_down, needle) == NULL;
    return OK;
}

int nvmlDeviceGetNvLinkErrorCounter(void *dev, unsigned link, int counter, unsigned long long *value) {
    DEVICE_GUARD(dev, "nvlink");
    if (link >= g->nvlinks) return NOT_SUPPORTED;
    switch (counter) {
    case 0: *value = g->nvlink_replay; return OK;
    case 1: *value = g->nvlink_recovery; return OK;
    case 2: *value = g->nvlink_crc_flit; return OK;
    case 3: *value = g->nvlink_crc_data; return OK;
    default: return NOT_SUPPORTED;
    }
}

/* Application clocks (type 0: graphics); other clock types answer NotSupported. */
int nvmlDeviceGetApplicationsClock(void *dev, int type, unsigned *mhz) {
    DEVICE_GUARD(dev, "app_clocks");
    if (type != 0) return NOT_SUPPORTED;
    *mhz = g->app_clock_mhz;
    return OK;
}

int nvmlDeviceGetDefaultApplicationsClock(void *dev, int type, unsigned *mhz) {
    DEVICE_GUARD(dev, "app_clocks");
    if (type != 0) return NOT_SUPPORTED;
    *mhz = g->app_clock_default_mhz;
    return OK;
}

/* nvmlGpuFabricInfo_t (v1) as nvml.h lays it out */
typedef struct {
    unsigned char cluster_uuid[16];
    unsigned status;
    unsigned clique_id;
    unsigned state;
} fabric_info_t;

int nvmlDeviceGetGpuFabricInfo(void *dev, fabric_info_t *info) {
    DEVICE_GUARD(dev, "fabric");
    if (g->fabric_state < 0) return NOT_SUPPORTED;
    memset(info, 0, sizeof *info);
    info->state = (unsigned)g->fabric_state;
    info->status = g->fabric_status;
    return OK;
}
