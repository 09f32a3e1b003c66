/*
 * A fake libnvidia-ml.so.1 for GPU-less tests: exports the NVML symbols that nvidia-ml-py's
 * wrappers resolve, so the unmodified pynvml code path runs against scripted GPUs.
 *
 * Behaviour, all from environment variables read at nvmlInitWithFlags():
 *   FAKE_NVML_GPUS          number of GPUs (default 1, at most 16)
 *   FAKE_NVML_T0_NS         wall-clock epoch ns that script offsets count from (default: init time)
 *   FAKE_NVML_SCRIPT        file of "t_offset_s power_mw [util_gpu]" lines: power is a step function
 *                           (the last line at or before t); '#' starts a comment (default 100000 mW)
 *   FAKE_NVML_GPU_STEP_MW   GPU i draws script + i * this (default 0), to tell GPUs apart
 *   FAKE_NVML_LIMIT_MW      enforced power limit (default 700000)
 *   FAKE_NVML_ENERGY0_MJ    energy counter at t = 0 (default 1000000000)
 *   FAKE_NVML_LOST_AFTER_S  after this many seconds, every call on GPU FAKE_NVML_LOST_GPU
 *                           (default 0) returns NVML_ERROR_GPU_IS_LOST (15)
 *   FAKE_NVML_UNSUPPORTED   comma list of: instant, average, energy, util, memory, clocks, reasons,
 *                           temp, limit -- those return NVML_ERROR_NOT_SUPPORTED (3); "instant" and
 *                           "average" fail per field inside nvmlDeviceGetFieldValues
 *   FAKE_NVML_INIT_ERROR    nvmlInitWithFlags returns this code (e.g. 9, driver not loaded)
 *
 * Power and energy are exact: the energy counter is the integral of the scripted step function
 * (mW x s = mJ), so tests can compare measured energy with the script's own integral.
 * The averaged reading (nvmlDeviceGetPowerUsage, field 185) is the mean over the last second.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_GPUS 16
#define MAX_POINTS 4096
#define OK 0
#define ERR_INVALID_ARGUMENT 2
#define ERR_NOT_SUPPORTED 3
#define ERR_GPU_IS_LOST 15

typedef struct { int index; } fake_gpu_t;
typedef struct { unsigned int gpu; unsigned int memory; } util_t;
typedef struct { unsigned long long total, free, used; } memory_t;
typedef union {
    double dVal; unsigned int uiVal; unsigned long ulVal; unsigned long long ullVal;
    long long sllVal; int siVal; unsigned short usVal;
} value_t;
typedef struct {
    uint32_t fieldId; uint32_t scopeId; int64_t timestamp; int64_t latencyUsec;
    unsigned int valueType; unsigned int nvmlReturn; value_t value;
} field_value_t;

static fake_gpu_t gpus[MAX_GPUS];
static int n_gpus = 1;
static double t0_s;
static int n_points = 0;
static double pt_t[MAX_POINTS];
static double pt_mw[MAX_POINTS];
static unsigned pt_util[MAX_POINTS];
static double step_mw = 0, limit_mw = 700000, energy0_mj = 1e9;
static double lost_after_s = -1;
static int lost_gpu = 0;
static char unsupported[256] = "";

static double wall_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double env_num(const char *name, double fallback) {
    const char *v = getenv(name);
    return (v && *v) ? strtod(v, NULL) : fallback;
}

static int is_unsupported(const char *what) {
    char buf[258];
    char key[64];
    snprintf(buf, sizeof buf, ",%s,", unsupported);
    snprintf(key, sizeof key, ",%s,", what);
    return strstr(buf, key) != NULL;
}

static void load_script(void) {
    const char *path = getenv("FAKE_NVML_SCRIPT");
    n_points = 0;
    if (path && *path) {
        FILE *fh = fopen(path, "r");
        char line[256];
        while (fh && n_points < MAX_POINTS && fgets(line, sizeof line, fh)) {
            double t, mw;
            unsigned util = 0;
            if (line[0] == '#') continue;
            int got = sscanf(line, "%lf %lf %u", &t, &mw, &util);
            if (got < 2) continue;
            pt_t[n_points] = t;
            pt_mw[n_points] = mw;
            pt_util[n_points] = got >= 3 ? util : (mw > 150000 ? 90 : 0);
            n_points++;
        }
        if (fh) fclose(fh);
    }
    if (n_points == 0) {
        pt_t[0] = 0; pt_mw[0] = 100000; pt_util[0] = 0; n_points = 1;
    }
}

static double now_offset(void) { return wall_s() - t0_s; }

static int point_at(double t) {
    int k = 0;
    for (int i = 0; i < n_points; i++) {
        if (pt_t[i] <= t) k = i; else break;
    }
    return k;
}

static double power_mw(int gpu, double t) { return pt_mw[point_at(t)] + gpu * step_mw; }

/* Integral of the step function from 0 to t, in mJ; before the first point its value holds. */
static double energy_mj(int gpu, double t) {
    double e = 0;
    if (t <= 0) return energy0_mj + (pt_mw[0] + gpu * step_mw) * t;
    for (int i = 0; i < n_points; i++) {
        double start = i == 0 ? 0 : pt_t[i];
        double end = (i + 1 < n_points) ? pt_t[i + 1] : t;
        if (start < 0) start = 0;
        if (end > t) end = t;
        if (end > start) e += (pt_mw[i] + gpu * step_mw) * (end - start);
    }
    return energy0_mj + e;
}

static int check(void *device, int *gpu) {
    fake_gpu_t *g = (fake_gpu_t *)device;
    if (!g || g < gpus || g >= gpus + n_gpus) return ERR_INVALID_ARGUMENT;
    *gpu = g->index;
    if (lost_after_s >= 0 && g->index == lost_gpu && now_offset() >= lost_after_s) return ERR_GPU_IS_LOST;
    return OK;
}

int nvmlInitWithFlags(unsigned int flags) {
    (void)flags;
    int init_error = (int)env_num("FAKE_NVML_INIT_ERROR", 0);
    if (init_error) return init_error;
    n_gpus = (int)env_num("FAKE_NVML_GPUS", 1);
    if (n_gpus < 0) n_gpus = 0;
    if (n_gpus > MAX_GPUS) n_gpus = MAX_GPUS;
    for (int i = 0; i < MAX_GPUS; i++) gpus[i].index = i;
    const char *t0 = getenv("FAKE_NVML_T0_NS");
    t0_s = (t0 && *t0) ? strtod(t0, NULL) * 1e-9 : wall_s();
    step_mw = env_num("FAKE_NVML_GPU_STEP_MW", 0);
    limit_mw = env_num("FAKE_NVML_LIMIT_MW", 700000);
    energy0_mj = env_num("FAKE_NVML_ENERGY0_MJ", 1e9);
    lost_after_s = env_num("FAKE_NVML_LOST_AFTER_S", -1);
    lost_gpu = (int)env_num("FAKE_NVML_LOST_GPU", 0);
    const char *u = getenv("FAKE_NVML_UNSUPPORTED");
    snprintf(unsupported, sizeof unsupported, "%s", u ? u : "");
    load_script();
    return OK;
}

int nvmlInit_v2(void) { return nvmlInitWithFlags(0); }
int nvmlShutdown(void) { return OK; }
const char *nvmlErrorString(int result) { (void)result; return "fake NVML error"; }

int nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    snprintf(version, length, "999.99-fake");
    return OK;
}

int nvmlDeviceGetCount_v2(unsigned int *count) { *count = (unsigned)n_gpus; return OK; }

int nvmlDeviceGetHandleByIndex_v2(unsigned int index, void **device) {
    if ((int)index >= n_gpus) return ERR_INVALID_ARGUMENT;
    *device = &gpus[index];
    return OK;
}

int nvmlDeviceGetName(void *device, char *name, unsigned int length) {
    int g, rc = check(device, &g);
    if (rc) return rc;
    snprintf(name, length, "Fake NVIDIA H200 #%d", g);
    return OK;
}

int nvmlDeviceGetUUID(void *device, char *uuid, unsigned int length) {
    int g, rc = check(device, &g);
    if (rc) return rc;
    snprintf(uuid, length, "GPU-fake-%04d", g);
    return OK;
}

static double average_mw(int g, double t) {
    double start = t - 1.0;
    return (energy_mj(g, t) - energy_mj(g, start)) / 1.0;
}

int nvmlDeviceGetPowerUsage(void *device, unsigned int *mw) {
    int g, rc = check(device, &g);
    if (rc) return rc;
    if (is_unsupported("average")) return ERR_NOT_SUPPORTED;
    *mw = (unsigned)(average_mw(g, now_offset()) + 0.5);
    return OK;
}

int nvmlDeviceGetTotalEnergyConsumption(void *device, unsigned long long *mj) {
    int g, rc = check(device, &g);
    if (rc) return rc;
    if (is_unsupported("energy")) return ERR_NOT_SUPPORTED;
    *mj = (unsigned long long)energy_mj(g, now_offset());
    return OK;
}

int nvmlDeviceGetEnforcedPowerLimit(void *device, unsigned int *mw) {
    int g, rc = check(device, &g);
    if (rc) return rc;
    if (is_unsupported("limit")) return ERR_NOT_SUPPORTED;
    *mw = (unsigned)limit_mw;
    return OK;
}

int nvmlDeviceGetUtilizationRates(void *device, util_t *util) {
    int g, rc = check(device, &g);
    if (rc) return rc;
    if (is_unsupported("util")) return ERR_NOT_SUPPORTED;
    util->gpu = pt_util[point_at(now_offset())];
    util->memory = util->gpu / 2;
    return OK;
}

int nvmlDeviceGetMemoryInfo(void *device, memory_t *mem) {
    int g, rc = check(device, &g);
    if (rc) return rc;
    if (is_unsupported("memory")) return ERR_NOT_SUPPORTED;
    mem->total = 150754820096ULL;
    mem->used = 130000000000ULL + (unsigned long long)g;
    mem->free = mem->total - mem->used;
    return OK;
}

int nvmlDeviceGetClockInfo(void *device, int type, unsigned int *mhz) {
    int g, rc = check(device, &g);
    if (rc) return rc;
    if (is_unsupported("clocks")) return ERR_NOT_SUPPORTED;
    if (type == 2) *mhz = 3201;                 /* NVML_CLOCK_MEM */
    else *mhz = power_mw(g, now_offset()) > 150000 ? 1980 : 345;
    return OK;
}

int nvmlDeviceGetTemperature(void *device, int sensor, unsigned int *temp) {
    int g, rc = check(device, &g);
    if (rc) return rc;
    (void)sensor;
    if (is_unsupported("temp")) return ERR_NOT_SUPPORTED;
    *temp = 30 + (unsigned)(power_mw(g, now_offset()) / 20000.0);
    return OK;
}

int nvmlDeviceGetCurrentClocksEventReasons(void *device, unsigned long long *reasons) {
    int g, rc = check(device, &g);
    if (rc) return rc;
    if (is_unsupported("reasons")) return ERR_NOT_SUPPORTED;
    double p = power_mw(g, now_offset());
    *reasons = p < 150000 ? 0x1ULL : (p >= 0.95 * limit_mw ? 0x4ULL : 0x0ULL);
    return OK;
}

int nvmlDeviceGetCurrentClocksThrottleReasons(void *device, unsigned long long *reasons) {
    return nvmlDeviceGetCurrentClocksEventReasons(device, reasons);
}

int nvmlDeviceGetFieldValues(void *device, int count, field_value_t *values) {
    int g, rc = check(device, &g);
    if (rc) return rc;
    double t = now_offset();
    for (int i = 0; i < count; i++) {
        field_value_t *v = &values[i];
        v->timestamp = (int64_t)((t0_s + t) * 1e6);
        v->latencyUsec = 0;
        v->valueType = 1; /* NVML_VALUE_TYPE_UNSIGNED_INT */
        if (v->fieldId == 186 && !is_unsupported("instant")) {
            v->nvmlReturn = OK; v->value.uiVal = (unsigned)power_mw(g, t);
        } else if (v->fieldId == 185 && !is_unsupported("average")) {
            v->nvmlReturn = OK; v->value.uiVal = (unsigned)(average_mw(g, t) + 0.5);
        } else if (v->fieldId == 83 && !is_unsupported("energy")) {
            v->nvmlReturn = OK; v->valueType = 3; v->value.ullVal = (unsigned long long)energy_mj(g, t);
        } else {
            v->nvmlReturn = ERR_NOT_SUPPORTED;
        }
    }
    return OK;
}
