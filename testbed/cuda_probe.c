/* A CUDA program with no CUDA toolkit: it loads the driver (libcuda.so.1) at run time, JIT-compiles a
 * vector-add kernel written in PTX, runs it on every GPU it sees and checks the result. Used to prove
 * the NVIDIA hook on real hardware (see docs/gpu.md). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext, *CUmodule, *CUfunction;
typedef unsigned long long CUdeviceptr;

static const char PTX[] =
    ".version 7.0\n.target sm_50\n.address_size 64\n"
    ".visible .entry vadd(.param .u64 a, .param .u64 b, .param .u64 c, .param .u32 n)\n{\n"
    " .reg .pred p; .reg .b32 r<6>; .reg .b64 rd<11>; .reg .f32 f<4>;\n"
    " ld.param.u64 rd1, [a]; ld.param.u64 rd2, [b]; ld.param.u64 rd3, [c]; ld.param.u32 r1, [n];\n"
    " mov.u32 r2, %ctaid.x; mov.u32 r3, %ntid.x; mov.u32 r4, %tid.x; mad.lo.s32 r5, r2, r3, r4;\n"
    " setp.ge.u32 p, r5, r1; @p bra DONE;\n"
    " cvta.to.global.u64 rd4, rd1; cvta.to.global.u64 rd5, rd2; cvta.to.global.u64 rd6, rd3;\n"
    " mul.wide.u32 rd7, r5, 4; add.s64 rd8, rd4, rd7; add.s64 rd9, rd5, rd7; add.s64 rd10, rd6, rd7;\n"
    " ld.global.f32 f1, [rd8]; ld.global.f32 f2, [rd9]; add.f32 f3, f1, f2; st.global.f32 [rd10], f3;\n"
    "DONE:\n ret;\n}\n";

#define N (1 << 20)
#define LOAD(name) name##_t name = (name##_t)dlsym(cuda, #name)
#define CHECK(call) do { CUresult e = (call); if (e) { fprintf(stderr, "%s failed: %d\n", #call, e); return 1; } } while (0)

typedef CUresult (*cuInit_t)(unsigned);
typedef CUresult (*cuDriverGetVersion_t)(int *);
typedef CUresult (*cuDeviceGetCount_t)(int *);
typedef CUresult (*cuDeviceGet_t)(CUdevice *, int);
typedef CUresult (*cuDeviceGetName_t)(char *, int, CUdevice);
typedef CUresult (*cuCtxCreate_v2_t)(CUcontext *, unsigned, CUdevice);
typedef CUresult (*cuModuleLoadData_t)(CUmodule *, const void *);
typedef CUresult (*cuModuleGetFunction_t)(CUfunction *, CUmodule, const char *);
typedef CUresult (*cuMemAlloc_v2_t)(CUdeviceptr *, size_t);
typedef CUresult (*cuMemcpyHtoD_v2_t)(CUdeviceptr, const void *, size_t);
typedef CUresult (*cuMemcpyDtoH_v2_t)(void *, CUdeviceptr, size_t);
typedef CUresult (*cuLaunchKernel_t)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                     unsigned, void *, void **, void **);
typedef CUresult (*cuCtxSynchronize_t)(void);
typedef CUresult (*cuCtxDestroy_v2_t)(CUcontext);

int main(void) {
    void *cuda = dlopen("libcuda.so.1", RTLD_NOW);
    if (!cuda) { fprintf(stderr, "cannot load the CUDA driver: %s\n", dlerror()); return 1; }
    LOAD(cuInit); LOAD(cuDriverGetVersion); LOAD(cuDeviceGetCount); LOAD(cuDeviceGet); LOAD(cuDeviceGetName);
    LOAD(cuCtxCreate_v2); LOAD(cuModuleLoadData); LOAD(cuModuleGetFunction); LOAD(cuMemAlloc_v2);
    LOAD(cuMemcpyHtoD_v2); LOAD(cuMemcpyDtoH_v2); LOAD(cuLaunchKernel); LOAD(cuCtxSynchronize); LOAD(cuCtxDestroy_v2);
    int version = 0, count = 0;
    CHECK(cuInit(0));
    CHECK(cuDriverGetVersion(&version));
    CHECK(cuDeviceGetCount(&count));
    printf("CUDA driver API %d.%d, %d device(s)\n", version / 1000, version % 1000 / 10, count);
    float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b), *c = malloc(N * sizeof *c);
    for (int i = 0; i < N; i++) { a[i] = (float)i; b[i] = 2.0f * (float)i; }
    for (int d = 0; d < count; d++) {
        CUdevice device; CUcontext context; CUmodule module; CUfunction vadd; CUdeviceptr da, db, dc;
        char name[256];
        CHECK(cuDeviceGet(&device, d));
        CHECK(cuDeviceGetName(name, sizeof name, device));
        CHECK(cuCtxCreate_v2(&context, 0, device));
        CHECK(cuModuleLoadData(&module, PTX));
        CHECK(cuModuleGetFunction(&vadd, module, "vadd"));
        CHECK(cuMemAlloc_v2(&da, N * sizeof *a)); CHECK(cuMemAlloc_v2(&db, N * sizeof *b));
        CHECK(cuMemAlloc_v2(&dc, N * sizeof *c));
        CHECK(cuMemcpyHtoD_v2(da, a, N * sizeof *a)); CHECK(cuMemcpyHtoD_v2(db, b, N * sizeof *b));
        unsigned n = N;
        void *args[] = {&da, &db, &dc, &n};
        CHECK(cuLaunchKernel(vadd, N / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
        CHECK(cuCtxSynchronize());
        CHECK(cuMemcpyDtoH_v2(c, dc, N * sizeof *c));
        int wrong = 0;
        for (int i = 0; i < N; i++) wrong += c[i] != 3.0f * (float)i;
        printf("device %d: %s: vector add of %d floats on the GPU: %s\n", d, name, N, wrong ? "WRONG" : "ok");
        CHECK(cuCtxDestroy_v2(context));
        if (wrong) return 1;
    }
    return count ? 0 : 1;
}
