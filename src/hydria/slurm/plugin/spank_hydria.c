/*
 * spank_hydria: the thin C shim of hydria's Slurm plugin (see docs/slurm.md).
 *
 * It owns no policy. It registers pyxis's --container-* options, hands every value given to the
 * Python side (`hydria slurm validate|start|cleanup`, run as the job's user), and in each task joins
 * the namespaces of the step's container before Slurm execs the task's program.
 *
 * Step lifecycle in slurmstepd:
 *   user_init  (once per step, before tasks fork): runs `hydria slurm start`, which imports and sets up
 *              the container and stops itself inside it (SIGSTOP); its PID holds the namespaces.
 *              Errors are kept and reported in task_init, because Slurm does not show user_init's.
 *   task_init  (in each task, as the user): the task's environment as the start's plan says (the
 *              holder's merged in), setns into the holder's namespaces, chdir.
 *   task_exit  (when the last local task has exited; else at exit): kill the holder, run
 *              `hydria slurm cleanup`.
 * With plugstack store_trees=FOLDER, user_init also mounts the node's trees of the image store's
 * images for the step, and each start gets a pipe to the store account's keeper of them; the
 * teardown unmounts them (hydria/container/store_trees.py).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <grp.h>
#include <pwd.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <slurm/spank.h>

SPANK_PLUGIN(hydria, 1);

/* `hydria slurm install-plugin` writes it from the Python declarations (hydria/slurm/generated.py):
 * HYDRIA_OPTION_TABLE, the step options; JOB_VARIABLE_PREFIXES (HYDRIA_CONTAINER_, then pyxis's
 * PYXIS_CONTAINER_); FALSE_VALUES, pyxis's; the plugstack keys the shim reads itself (KEY_*,
 * JOB_SCOPE, DEFAULT_RUNTIME_PATH); the exit statuses of `hydria slurm start`: DISABLED_STATUS
 * (no container for this step), ATTACH_STATUS (join the running container "@attach PID" names) and
 * STORE_STATUS (the image store lacks "@store-import URI": its owner imports it (plugstack
 * store_owner), then the start runs again). */
#include "hydria_generated.h"

#define MAX_ARGS 256
/* Slurm's special step ids (slurm/slurm.h, which spank.h does not include) */
#define EXTERN_STEP 0xfffffffcU
#define BATCH_STEP 0xfffffffbU
#define INTERACTIVE_STEP 0xfffffffaU

static char *hydria_path = "hydria";       /* plugstack argument hydria=PATH */
static char *config_args[32];              /* the other plugstack arguments, passed on */
static int config_count;
static char *option_args[MAX_ARGS];        /* every --container-* occurrence, "--name=value" */
static int option_count;
static pid_t holder = -1;                  /* the stopped container process of this step */
static int attached;                       /* holder is a running container's: not ours to stop */

/* The holder's namespaces, environment and working directory, taken in user_init: the tasks
 * join these even if the process is gone by then (a joined container's may end at any time). */
static const struct {
    const char *name;
    int type;
} NAMESPACES[] = {{"user", CLONE_NEWUSER}, {"cgroup", CLONE_NEWCGROUP}, {"mnt", CLONE_NEWNS},
                  {"ipc", CLONE_NEWIPC},   {"uts", CLONE_NEWUTS},       {"net", CLONE_NEWNET}};
#define NAMESPACE_COUNT (sizeof NAMESPACES / sizeof *NAMESPACES)
static int namespace_fds[NAMESPACE_COUNT] = {-1, -1, -1, -1, -1, -1};
static char *holder_environ;
static char holder_cwd[PATH_MAX];
static uint32_t *started;                  /* tasks that joined the container (shared with them) */
static char step_cwd[PATH_MAX];            /* the step's working directory, as user_init found it */
static char *entrypoint_output;            /* what the container's start printed, for --container-entrypoint-log */
/* What `hydria slurm start` resolved from the options and their defaults, told by marked lines */
static int needs_cleanup;                  /* "@cleanup": the start left something for `hydria slurm cleanup` */
static int save_requested;                 /* "@save": --container-save */
static int show_entrypoint_output;         /* "@entrypoint-log": the entrypoint ran and its output is wanted */
static char step_workdir[PATH_MAX];        /* "@workdir PATH": --container-workdir */
static char *start_error;                  /* what `hydria slurm start` said when it failed */
static char *env_plan;                     /* the "@env-..." marks: each task's environment (apply_env_plan) */
static char *store_request;                /* "@store-import URI": the image for the store's owner to import */

static int option_cb(int val, const char *optarg, int remote);

#define OPT(name, arg, help) {name, arg, "[hydria] " help, arg ? 1 : 0, 0, option_cb}
static struct spank_option options[] = {
    HYDRIA_OPTION_TABLE
    SPANK_OPTIONS_TABLE_END
};

static int option_cb(int val, const char *optarg, int remote)
{
    char *arg;
    (void)remote;
    if (option_count >= MAX_ARGS)
        return -1;
    if (asprintf(&arg, "--%s%s%s", options[val].name, options[val].has_arg ? "=" : "",
                 options[val].has_arg && optarg ? optarg : "") < 0)
        return -1;
    option_args[option_count++] = arg;
    return 0;
}

/* The job's variable PREFIX<suffix>, for the first of JOB_VARIABLE_PREFIXES that it has */
static int job_variable(spank_t sp, const char *suffix, char *value, size_t size)
{
    static const char *const prefixes[] = {JOB_VARIABLE_PREFIXES};
    char name[64];
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++) {
        snprintf(name, sizeof name, "%s%s", prefixes[i], suffix);
        if (spank_remote(sp)) {
            if (spank_getenv(sp, name, value, (int)size) == ESPANK_SUCCESS)
                return 1;
        } else if (getenv(name)) {
            snprintf(value, size, "%s", getenv(name));
            return 1;
        }
    }
    return 0;
}

static int wanted(spank_t sp)
{
    char value[4096];
    if (option_count > 0)
        return 1;
    return job_variable(sp, "IMAGE", value, sizeof value) || job_variable(sp, "NAME", value, sizeof value);
}

/* The plugstack's false values; anything else is checked (and refused) by `hydria slurm validate` */
static int is_false(const char *value)
{
    static const char *const values[] = {FALSE_VALUES};
    for (size_t i = 0; i < sizeof values / sizeof *values; i++)
        if (strcmp(value, values[i]) == 0)
            return 1;
    return 0;
}

/* The value of plugstack argument `argument` when it is KEY=VALUE, else NULL */
static const char *value_of(const char *argument, const char *key)
{
    size_t length = strlen(key);
    return strncmp(argument, key, length) == 0 && argument[length] == '=' ? argument + length + 1 : NULL;
}

/* The plugstack arguments: hydria=PATH for us, the others passed on to Python; of those, the
 * shim itself reads sbatch_support, runtime_path, container_scope and store_owner. */
static int allocator_options = 1;               /* sbatch_support: the options in sbatch and salloc */
static const char *runtime_path = DEFAULT_RUNTIME_PATH; /* runtime_path */
static int job_scope;                           /* container_scope=job */
static const char *store_owner;                 /* store_owner=NAME: the account that fills the image store */
static const char *store_trees;                 /* store_trees=FOLDER: where it keeps what steps read of it */
static char store_mount[PATH_MAX];               /* store_trees, mounted for this step's user */

static void parse_arguments(int ac, char **av)
{
    const char *value;
    config_count = 0;
    allocator_options = 1;
    runtime_path = DEFAULT_RUNTIME_PATH;
    job_scope = 0;
    store_owner = NULL;
    store_trees = NULL;
    for (int i = 0; i < ac; i++) {
        if (strncmp(av[i], "hydria=", 7) == 0)
            hydria_path = av[i] + 7;
        else if (config_count < 32)
            config_args[config_count++] = av[i];
        if ((value = value_of(av[i], KEY_SBATCH_SUPPORT)))
            allocator_options = !is_false(value);
        else if ((value = value_of(av[i], KEY_RUNTIME_PATH)))
            runtime_path = value;
        else if ((value = value_of(av[i], KEY_CONTAINER_SCOPE)))
            job_scope = strcmp(value, JOB_SCOPE) == 0;
        else if ((value = value_of(av[i], KEY_STORE_OWNER)) && *value)
            store_owner = value;
        else if ((value = value_of(av[i], KEY_STORE_TREES)) && *value == '/')
            store_trees = value;  /* anything else: `hydria slurm start` says what is wrong */
    }
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
    parse_arguments(ac, av);
    for (int i = 0; options[i].name; i++) {
        options[i].val = i;
        if (spank_context() == S_CTX_SLURMD || spank_context() == S_CTX_JOB_SCRIPT ||
            (spank_context() == S_CTX_ALLOCATOR && !allocator_options))
            continue;
        if (spank_option_register(sp, &options[i]) != ESPANK_SUCCESS)
            return -1;
    }
    return 0;
}

/* argv of `hydria slurm SUBCOMMAND [--config KEY=VALUE]... [OPTIONS]... [EXTRA...]`; `extras` ends
 * with NULL, and its NULL entries before that are skipped. */
static char **command(const char *subcommand, const char *const *extras, size_t count)
{
    static char *argv[MAX_ARGS + 80];
    int n = 0;
    argv[n++] = hydria_path;
    argv[n++] = "slurm";
    argv[n++] = (char *)subcommand;
    for (int i = 0; i < config_count; i++) {
        argv[n++] = "--config";
        argv[n++] = config_args[i];
    }
    for (int i = 0; i < option_count; i++)
        argv[n++] = option_args[i];
    for (size_t i = 0; i < count; i++)
        if (extras[i])
            argv[n++] = (char *)extras[i];
    argv[n] = NULL;
    return argv;
}

/* Who a program the plugin runs runs as (run_hydria): the job's user with the job's groups and
 * environment, or a local account with the groups the group database gives it and a clean
 * environment of its own (nothing of the job's). */
struct identity {
    uid_t uid;
    gid_t gid;
    gid_t *groups; /* supplementary groups */
    int ngroups;
    char **job_environment;         /* the job's; NULL for an account */
    const struct passwd *account;   /* for the account's environment */
};

static int job_identity(spank_t sp, struct identity *who)
{
    memset(who, 0, sizeof *who);
    if (spank_get_item(sp, S_JOB_UID, &who->uid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_GID, &who->gid) != ESPANK_SUCCESS)
        return -1;
    spank_get_item(sp, S_JOB_SUPPLEMENTARY_GIDS, &who->groups, &who->ngroups);
    spank_get_item(sp, S_JOB_ENV, &who->job_environment);
    return 0;
}

/* `account` with primary group `gid`; free(who->groups) after. */
static int account_identity(const struct passwd *account, gid_t gid, struct identity *who)
{
    int count = 0;
    memset(who, 0, sizeof *who);
    who->uid = account->pw_uid;
    who->gid = gid;
    who->account = account;
    getgrouplist(account->pw_name, gid, NULL, &count);
    if (count <= 0 || !(who->groups = calloc(count, sizeof *who->groups)) ||
        getgrouplist(account->pw_name, gid, who->groups, &count) < 0)
        return -1;
    who->ngroups = count;
    return 0;
}

/* Become `who` for good: groups, then gid, then uid (slurmstepd may run the plugin with another
 * effective uid for the moment), and their environment. The plugin's one privilege drop. */
static int become(const struct identity *who)
{
    if (getuid() != 0 && getuid() != who->uid)
        return -1;
    if (getuid() == 0 && ((geteuid() != 0 && seteuid(0) < 0) || setgroups(who->ngroups, who->groups) < 0 ||
                          setresgid(who->gid, who->gid, who->gid) < 0 ||
                          setresuid(who->uid, who->uid, who->uid) < 0))
        return -1;
    clearenv();
    for (char **e = who->job_environment; e && *e; e++)
        if (strncmp(*e, "LD_PRELOAD=", 11) && strncmp(*e, "LD_LIBRARY_PATH=", 16))
            putenv(*e);
    if (who->account) {
        setenv("HOME", who->account->pw_dir, 1);
        setenv("USER", who->account->pw_name, 1);
        setenv("LOGNAME", who->account->pw_name, 1);
    }
    if (!getenv("PATH"))
        setenv("PATH", "/usr/local/bin:/usr/bin:/bin", 1);
    return 0;
}

/* Close the descriptors from `low` to `high`: close_range where the kernel has it (5.9), else one
 * by one up to the descriptor limit (at most 65536). */
static void close_between(unsigned low, unsigned high)
{
#ifdef SYS_close_range
    if (syscall(SYS_close_range, low, high, 0) == 0)
        return;
#endif
    long last = sysconf(_SC_OPEN_MAX), limit = last > 0 && last < 65536 ? last : 65536;
    for (long fd = low; fd <= (long)high && fd < limit; fd++)
        close((int)fd);
}

/* Close every descriptor from 3 up but those `keep` lists (ended by -1; NULL: none). */
static void close_inherited(const int *keep)
{
    unsigned low = 3;
    for (;;) {
        long next = -1;  /* the lowest kept descriptor from low up */
        for (const int *k = keep; k && *k >= 0; k++)
            if ((unsigned)*k >= low && (next < 0 || *k < next))
                next = *k;
        if (next < 0) {
            close_between(low, ~0U);
            return;
        }
        if ((unsigned)next > low)
            close_between(low, (unsigned)next - 1);
        low = (unsigned)next + 1;
    }
}

/* The one way the plugin runs a program (hydria): in a child, standard input /dev/null, standard
 * output and error to `output` (-1: kept), no other inherited descriptor but those `pass` lists
 * (ended by -1; NULL: none),
 * as `who` (NULL: as this process), in `cwd` (NULL: here; "/" when it cannot be entered). With
 * DETACHED in `how`, the program runs on in a session of its own and the child returned exits at
 * once; with IDLE, at the lowest CPU priority (and so I/O priority), from its first instruction.
 * Returns the child's PID, or -1. */
#define DETACHED 1
#define IDLE 2
static pid_t run_hydria(char *const argv[], const struct identity *who, int output, const int *pass,
                        const char *cwd, int how)
{
    static const struct sched_param no_priority = {0};
    pid_t child = fork();
    if (child != 0)
        return child;
    if (how & DETACHED) {
        if (fork() != 0)
            _exit(0);
        setsid();
    }
    if ((how & IDLE) && sched_setscheduler(0, SCHED_IDLE, &no_priority) < 0)
        _exit(124);
    int null = open("/dev/null", O_RDONLY);
    if (null < 0 || dup2(null, STDIN_FILENO) < 0 ||
        (output >= 0 && (dup2(output, STDOUT_FILENO) < 0 || dup2(output, STDERR_FILENO) < 0)))
        _exit(122);
    close_inherited(pass);
    for (const int *fd = pass; fd && *fd >= 0; fd++)
        fcntl(*fd, F_SETFD, 0);  /* hydria makes them close-on-exec again at once */
    if (who && become(who) < 0) {
        fprintf(stderr, "hydria: cannot become user %u: %s\n", (unsigned)who->uid, strerror(errno));
        _exit(121);
    }
    if (cwd && chdir(cwd) < 0) {
        fprintf(stderr, "hydria: cannot enter %s: %s\n", cwd, strerror(errno));
        if (chdir("/") < 0)
            _exit(123);
    }
    execvp(argv[0], argv);
    fprintf(stderr, "hydria: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

static char *read_all(int fd)
{
    size_t size = 0, cap = 4096;
    ssize_t got;
    char *text = malloc(cap), *bigger;
    lseek(fd, 0, SEEK_SET);
    while (text && (got = read(fd, text + size, cap - size - 1)) > 0) {
        size += got;
        if (cap - size < 2) {
            if (!(bigger = realloc(text, cap * 2))) {
                free(text);
                return NULL;
            }
            text = bigger;
            cap *= 2;
        }
    }
    if (text)
        text[size] = '\0';
    return text;
}

/* Print what a child wrote to the memfd `log` through slurm_error, line by line. */
static void report(int log)
{
    char *output = read_all(log);
    for (char *line = output ? strtok(output, "\n") : NULL; line; line = strtok(NULL, "\n"))
        slurm_error("%s", line);
    free(output);
}

static int wait_for(pid_t child, int flags)
{
    int status = 0;
    while (waitpid(child, &status, flags) < 0 && errno == EINTR)
        ;
    return status;
}

/* The submit side (srun, sbatch, salloc): validate the options before anything is sent. */
static int validate(void)
{
    pid_t child = run_hydria(command("validate", NULL, 0), NULL, -1, NULL, NULL, 0);
    if (child < 0)
        return -1;
    int status = wait_for(child, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE 1              /* renameat2's flag (Linux 3.15), where libc lacks it */
#endif

/* `path` made whole where missing: a folder with `mode`, given to `uid`, `gid`, made under a new
 * name of its own (mkdtemp) and renamed into place, so that a step starting beside this one
 * (of the same user, or another node's where nodes share the folder) never sees it before its
 * chown; 0 where it is there now, whoever made it. */
static int make_owned_folder(const char *path, mode_t mode, uid_t uid, gid_t gid)
{
    char made[PATH_MAX];
    if (snprintf(made, sizeof made, "%s.new-XXXXXX", path) >= (int)sizeof made) {
        errno = ENAMETOOLONG;
        return -1;
    }
    if (!mkdtemp(made))
        return -1;
    if (chown(made, uid, gid) == 0 && chmod(made, mode) == 0 &&
        syscall(SYS_renameat2, AT_FDCWD, made, AT_FDCWD, path, RENAME_NOREPLACE) == 0)
        return 0;
    int why = errno;
    rmdir(made);
    errno = why;
    return why == EEXIST ? 0 : -1;  /* EEXIST: the other step's came first */
}

/* The plugstack's runtime_path (pyxis's; default /run/hydria-spank) and, in it, the job user's own
 * directory (0700), made here as root, where an importer plugin may put the squashfs files it
 * makes (PYXIS_RUNTIME_PATH/UID). Only the last component of runtime_path is created, as pyxis.
 * In slurmstepd's post_opt, which still runs as root (user_init runs as the user). */
static void make_runtime_dir(spank_t sp)
{
    const char *base = runtime_path;
    char path[PATH_MAX];
    struct stat info;
    uid_t uid;
    gid_t gid;

    if (spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_GID, &gid) != ESPANK_SUCCESS ||
        snprintf(path, sizeof path, "%s/%u", base, (unsigned)uid) >= (int)sizeof path)
        return;
    if (mkdir(base, 0755) < 0 && errno != EEXIST)
        return;
    if (lstat(path, &info) < 0 && errno == ENOENT && make_owned_folder(path, 0700, uid, gid) < 0)
        slurm_error("hydria: cannot make %s for uid %u: %s", path, (unsigned)uid, strerror(errno));
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (!spank_remote(sp) && wanted(sp))
        return validate();
    if (spank_remote(sp) && wanted(sp))
        make_runtime_dir(sp);
    return 0;
}

/* "--step=JOB.STEP", STEP being a number, "batch" or "interactive"; 0 for the extern step, which
 * runs no task of the user's and never gets a container. */
static int step_argument(spank_t sp, char *buffer, size_t size)
{
    uint32_t job = 0, step = 0;
    spank_get_item(sp, S_JOB_ID, &job);
    spank_get_item(sp, S_JOB_STEPID, &step);
    if (step == EXTERN_STEP)
        return 0;
    if (step == BATCH_STEP || step == INTERACTIVE_STEP)
        snprintf(buffer, size, "--step=%u.%s", job, step == BATCH_STEP ? "batch" : "interactive");
    else
        snprintf(buffer, size, "--step=%u.%u", job, step);
    return 1;
}

/* Take hold of what the tasks need from process `pid`; -1 when it is gone. */
static int snapshot(pid_t pid)
{
    char path[64];
    int fd;
    ssize_t length;
    for (size_t i = 0; i < NAMESPACE_COUNT; i++) {
        snprintf(path, sizeof path, "/proc/%d/ns/%s", pid, NAMESPACES[i].name);
        namespace_fds[i] = open(path, O_RDONLY | O_CLOEXEC);  /* cgroup may be missing */
        if (namespace_fds[i] < 0 && NAMESPACES[i].type != CLONE_NEWCGROUP)
            return -1;
    }
    snprintf(path, sizeof path, "/proc/%d/cwd", pid);
    length = readlink(path, holder_cwd, sizeof holder_cwd - 1);
    holder_cwd[length > 0 ? length : 0] = '\0';
    snprintf(path, sizeof path, "/proc/%d/environ", pid);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return -1;
    holder_environ = read_all(fd);
    close(fd);
    return holder_environ && kill(pid, 0) == 0 ? 0 : -1;
}

/* "@log MESSAGE", a line for the user: passed to slurm_spank_log. Returns whether `line` was one. */
static int log_mark(const char *line, int length)
{
    if (length < 5 || strncmp(line, "@log ", 5) != 0)
        return 0;
    slurm_spank_log("%.*s", length - 5, line + 5);
    return 1;
}

/* The marks `hydria slurm start` wrote to its own descriptor (never its output, which the image's
 * entrypoint shares): "@log MESSAGE" goes to the user (importing an image, ...); the others say
 * what it resolved. Returns the PID of "@attach PID", if any. */
static const char *read_marks(const char *marks)
{
    const char *attach = NULL;
    needs_cleanup = save_requested = show_entrypoint_output = 0;
    for (const char *line = marks; line && *line;) {
        const char *end = strchrnul(line, '\n');
        int length = (int)(end - line);
        if (log_mark(line, length))
            ;
        else if (strncmp(line, "@attach ", 8) == 0)
            attach = line + 8;
        else if (strncmp(line, "@workdir ", 9) == 0)
            snprintf(step_workdir, sizeof step_workdir, "%.*s", length - 9, line + 9);
        else if (strncmp(line, "@store-import ", 14) == 0) {
            free(store_request);
            store_request = strndup(line + 14, length - 14);
        }
        needs_cleanup |= length == 8 && strncmp(line, "@cleanup", 8) == 0;
        save_requested |= length == 5 && strncmp(line, "@save", 5) == 0;
        show_entrypoint_output |= length == 15 && strncmp(line, "@entrypoint-log", 15) == 0;
        line = *end ? end + 1 : end;
    }
    return attach;
}

/* The new mount API (Linux 5.2; idmapped mounts 5.12), by number where libc lacks it */
#ifndef SYS_open_tree
#define SYS_open_tree 428
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
#define TREE_CLONE 1                    /* OPEN_TREE_CLONE */
#define TREE_RECURSIVE 0x8000           /* AT_RECURSIVE */
#define MOVE_FROM_EMPTY_PATH 0x4        /* MOVE_MOUNT_F_EMPTY_PATH */
#define ATTR_READ_ONLY 0x1              /* MOUNT_ATTR_RDONLY */
#define ATTR_NO_SUID 0x2                /* MOUNT_ATTR_NOSUID */
#define ATTR_NO_DEV 0x4                 /* MOUNT_ATTR_NODEV */
#define ATTR_IDMAP 0x00100000           /* MOUNT_ATTR_IDMAP */
struct idmap_attributes {               /* struct mount_attr */
    uint64_t set, clear, propagation, userns_fd;
};

/* Write "INSIDE OUTSIDE 1" to process `pid`'s uid_map or gid_map (`file`). */
static int write_map(pid_t pid, const char *file, unsigned inside, unsigned outside)
{
    char path[64], line[64];
    snprintf(path, sizeof path, "/proc/%d/%s", pid, file);
    int fd = open(path, O_WRONLY | O_CLOEXEC), length = snprintf(line, sizeof line, "%u %u 1\n", inside, outside);
    int written = fd >= 0 && write(fd, line, length) == length;
    if (fd >= 0)
        close(fd);
    return written ? 0 : -1;
}

/* A user namespace in which the store account's IDs are the host's `uid` and `gid`: a mount
 * idmapped with it shows the account's files as theirs. Its descriptor, or -1. */
static int idmap_namespace(const struct passwd *owner, uid_t uid, gid_t gid)
{
    int ready[2], hold[2], fd = -1;
    char answer = 'n', path[64];
    if (pipe2(ready, O_CLOEXEC) < 0)
        return -1;
    if (pipe2(hold, O_CLOEXEC) < 0) {
        close(ready[0]);
        close(ready[1]);
        return -1;
    }
    pid_t child = fork();
    if (child == 0) {  /* unshares, then waits until the namespace is taken */
        close(hold[1]);
        answer = unshare(CLONE_NEWUSER) == 0 ? 'y' : 'n';
        if (write(ready[1], &answer, 1) == 1)
            (void)!read(hold[0], &answer, 1);
        _exit(0);
    }
    close(ready[1]);
    close(hold[0]);
    if (child > 0 && read(ready[0], &answer, 1) == 1 && answer == 'y' &&
        write_map(child, "uid_map", owner->pw_uid, uid) == 0 && write_map(child, "gid_map", owner->pw_gid, gid) == 0) {
        snprintf(path, sizeof path, "/proc/%d/ns/user", child);
        fd = open(path, O_RDONLY | O_CLOEXEC);
    }
    close(ready[0]);
    close(hold[1]);  /* the child ends */
    if (child > 0)
        wait_for(child, 0);
    return fd;
}

/* `path` a folder (not a link) of `uid`'s that nobody else may write, made with `mode` where
 * missing (and given to `uid`, `gid`); -1 with errno set if it is not. */
static int own_folder(const char *path, mode_t mode, uid_t uid, gid_t gid)
{
    struct stat info;
    if (lstat(path, &info) < 0 && (errno != ENOENT || make_owned_folder(path, mode, uid, gid) < 0 ||
                                   lstat(path, &info) < 0))
        return -1;
    if (!S_ISDIR(info.st_mode) || info.st_uid != uid || (info.st_mode & 022)) {
        errno = EPERM;
        return -1;
    }
    return 0;
}

/* In a child, as root: store_trees (made the store account's where missing) mounted at `target`,
 * read-only, without set-user-ID files or devices, idmapped so that the account's files show
 * as the job user's. The child's exit status: 0, or the errno of what failed. */
static void mount_idmapped(const struct passwd *owner, uid_t uid, gid_t gid, const char *base, const char *target)
{
    struct idmap_attributes attributes = {ATTR_IDMAP | ATTR_READ_ONLY | ATTR_NO_SUID | ATTR_NO_DEV, 0, 0, 0};
    int tree, userns;
    if ((geteuid() != 0 && seteuid(0) < 0) || own_folder(store_trees, 0700, owner->pw_uid, owner->pw_gid) < 0 ||
        own_folder(base, 0755, 0, 0) < 0)
        _exit(errno & 0xff);
    if (umount2(target, MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT)
        _exit(errno & 0xff);  /* a killed step's mount is replaced */
    if ((mkdir(target, 0755) < 0 && errno != EEXIST) || (userns = idmap_namespace(owner, uid, gid)) < 0)
        _exit(errno & 0xff);
    attributes.userns_fd = (uint64_t)userns;
    tree = (int)syscall(SYS_open_tree, AT_FDCWD, store_trees, TREE_CLONE | TREE_RECURSIVE | AT_SYMLINK_NOFOLLOW | O_CLOEXEC);
    if (tree < 0 || syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | TREE_RECURSIVE, &attributes, sizeof attributes) < 0 ||
        syscall(SYS_move_mount, tree, "", AT_FDCWD, target, MOVE_FROM_EMPTY_PATH) < 0) {
        int why = errno;
        rmdir(target);
        _exit(why & 0xff);
    }
    _exit(0);
}

/* store_trees mounted for this step at RUNTIME_PATH/store-trees/JOB.STEP.NODE (store_mount). Where
 * it cannot be (a kernel before 5.12, a file system without idmapped mounts), slurmd's log says why
 * and each user keeps their own, as without store_trees. The node's name keeps two nodes that
 * share RUNTIME_PATH apart: one's rmdir at its step's end would take the other's mount away. */
static void mount_store_trees(spank_t sp, const char *ids)
{
    struct passwd *owner = getpwnam(store_owner);
    char base[PATH_MAX], target[PATH_MAX], node[HOST_NAME_MAX + 1] = "";
    uid_t uid;
    gid_t gid;
    (void)gethostname(node, sizeof node - 1);
    if (!owner || spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_GID, &gid) != ESPANK_SUCCESS ||
        snprintf(base, sizeof base, "%s/store-trees", runtime_path) >= (int)sizeof base ||
        snprintf(target, sizeof target, "%s/%s.%s", base, ids + strlen("--step="), node) >= (int)sizeof target)
        return;
    pid_t child = fork();
    if (child == 0)
        mount_idmapped(owner, uid, gid, base, target);
    int status = child > 0 ? wait_for(child, 0) : -1;
    if (child > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
        snprintf(store_mount, sizeof store_mount, "%s", target);
    else
        slurm_error("hydria: store_trees=%s: cannot mount it for the step at %s: %s; each user keeps their own "
                    "trees of the store's images", store_trees, target,
                    child > 0 && WIFEXITED(status) ? strerror(WEXITSTATUS(status)) : "cannot fork");
}

/* Unmount store_trees from the step, once its container is gone. */
static void unmount_store_trees(void)
{
    if (!*store_mount)
        return;
    pid_t child = fork();
    if (child == 0)
        _exit((geteuid() == 0 || seteuid(0) == 0) && umount2(store_mount, MNT_DETACH) == 0 && rmdir(store_mount) == 0
                  ? 0 : 1);
    if (child > 0)
        wait_for(child, 0);
    store_mount[0] = '\0';
}

/* `hydria store keep-reads` as the store's account, on its own and at idle priority, reading the
 * pipe end `reads` (it ends when the step's start and its unpacker have closed the other end).
 * Run once the start has set the container up, so that it takes nothing from the start. */
static void start_keeper(int reads)
{
    struct passwd *owner = getpwnam(store_owner);
    struct identity account = {0};
    char reads_arg[32];
    char *argv[] = {hydria_path, "store", "keep-reads", "--trees", (char *)store_trees, reads_arg, NULL};
    int null = open("/dev/null", O_WRONLY | O_CLOEXEC);
    pid_t child = -1;
    snprintf(reads_arg, sizeof reads_arg, "--reads-fd=%d", reads);
    if (owner && null >= 0 && account_identity(owner, owner->pw_gid, &account) == 0)
        child = run_hydria(argv, &account, null, (int[]){reads, -1}, owner->pw_dir, DETACHED | IDLE);
    if (child > 0)
        wait_for(child, 0);
    free(account.groups);
    if (null >= 0)
        close(null);
}

/* Run `hydria slurm start` as the user and take hold of the container it started or named
 * (holder, snapshot), or keep its error for task_init. */
static void start_container(spank_t sp, const char *ids, const char *script, const char *attach,
                            const char *store_fill)
{
    char marks_arg[32], tasks_arg[32], nodes_arg[32], trees_arg[PATH_MAX + 16], reads_arg[32];
    const char *extras[] = {ids, script, attach, store_fill, marks_arg, tasks_arg, nodes_arg, NULL, NULL};
    int status, log, marks, reads[2] = {-1, -1};
    pid_t child = -1;
    struct identity user;
    uint32_t tasks = 0, nodes = 0;

    spank_get_item(sp, S_JOB_TOTAL_TASK_COUNT, &tasks);
    spank_get_item(sp, S_JOB_NNODES, &nodes);
    snprintf(tasks_arg, sizeof tasks_arg, "--tasks=%u", tasks);
    snprintf(nodes_arg, sizeof nodes_arg, "--nodes=%u", nodes);

    if (*store_mount && pipe2(reads, O_CLOEXEC) == 0) {  /* to the store's keeper (start_keeper) */
        snprintf(trees_arg, sizeof trees_arg, "--store-trees=%s", store_mount);
        snprintf(reads_arg, sizeof reads_arg, "--store-reads-fd=%d", reads[1]);
        extras[7] = trees_arg;
        extras[8] = reads_arg;
    }
    log = memfd_create("hydria-start", MFD_CLOEXEC);
    marks = memfd_create("hydria-marks", MFD_CLOEXEC);
    snprintf(marks_arg, sizeof marks_arg, "--marks-fd=%d", marks);
    if (job_identity(sp, &user) == 0 && log >= 0 && marks >= 0)
        child = run_hydria(command("start", extras, 9), &user, log, (int[]){marks, reads[1], -1}, NULL, 0);
    if (reads[1] >= 0)
        close(reads[1]);  /* the start's and its unpacker's copies alone keep the keeper going */
    if (reads[0] >= 0 && child < 0)
        close(reads[0]);
    if (child < 0) {
        start_error = strdup("cannot start the container: out of resources");
        if (log >= 0)
            close(log);
        if (marks >= 0)
            close(marks);
        return;
    }
    status = wait_for(child, WUNTRACED);
    if (reads[0] >= 0) {  /* a container of this step's own was set up: the keeper may hear of it */
        if (WIFSTOPPED(status))
            start_keeper(reads[0]);
        close(reads[0]);
    }
    char *output = read_all(log);
    char *resolved = read_all(marks);
    const char *attach_pid = read_marks(resolved);
    /* "@store-import URI" counts only with that exit status, and where there is an owner to ask */
    int store_asked = WIFEXITED(status) && WEXITSTATUS(status) == STORE_STATUS && store_owner && store_request;
    if (WIFSTOPPED(status)) {
        holder = child;
        if (show_entrypoint_output) {
            entrypoint_output = output;
            output = NULL;
        }
    } else if (WIFEXITED(status) && WEXITSTATUS(status) == ATTACH_STATUS) {
        attached = 1;
        holder = attach_pid ? (pid_t)atoi(attach_pid) : -1;
        if (holder <= 0)
            start_error = strdup("hydria: cannot attach to the running container");
    } else if (store_asked) {
        /* user_init has the store's owner import it, then starts again */
    } else if (!(WIFEXITED(status) && WEXITSTATUS(status) == DISABLED_STATUS)) {
        start_error = output;
        output = NULL;
        if (!start_error || !*start_error) {
            free(start_error);
            start_error = strdup("hydria: the container did not start");
        }
    }
    if (!store_asked) {
        free(store_request);
        store_request = NULL;
    }
    free(output);
    free(env_plan);
    env_plan = resolved;
    close(log);
    close(marks);
    if (holder > 0 && snapshot(holder) < 0 && !start_error)
        start_error = strdup(attached ? "hydria: the running container exited while the step was joining it"
                                      : "hydria: the container exited before its tasks could join it");
}

/* Why a hydria command failed, from what it wrote: its last "[ERROR] " line, with the "[INFO] hint: "
 * line after it; else its exit status. */
static void failure_summary(const char *said, int status, char *out, size_t size)
{
    const char *error = NULL, *hint = NULL;
    for (const char *line = said; line && *line;) {
        const char *end = strchrnul(line, '\n');
        if (strncmp(line, "[ERROR] ", 8) == 0) {
            error = line;
            hint = NULL;
        } else if (error && !hint && strncmp(line, "[INFO] hint: ", 13) == 0) {
            hint = line;
        }
        line = *end ? end + 1 : end;
    }
    if (!error) {
        snprintf(out, size, WIFEXITED(status) ? "exit status %d" : "killed by signal %d",
                 WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        return;
    }
    int error_length = (int)(strchrnul(error, '\n') - error) - 8;
    if (hint)
        snprintf(out, size, "%.*s (%.*s)", error_length, error + 8,
                 (int)(strchrnul(hint, '\n') - hint) - 7, hint + 7);
    else
        snprintf(out, size, "%.*s", error_length, error + 8);
}

/* `hydria store import -- URI` as the image store's owner (plugstack store_owner), in a clean
 * environment and with no descriptor of slurmstepd's: nothing of the job reaches the account
 * that writes what every user reads, but the reference, which the user's own registry request
 * resolved first. When it fails, the start that follows imports the image for the user alone. */
static void fill_store(const char *uri)
{
    struct passwd *owner = getpwnam(store_owner);
    char marks_arg[32];
    char *argv[] = {hydria_path, "store", "import", marks_arg, "--", (char *)uri, NULL};
    struct identity account = {0};
    int status = -1, log, marks;
    pid_t child = -1;

    if (!owner) {
        slurm_error("hydria: store_owner=%s: no such user", store_owner);
        return;
    }
    slurm_spank_log("hydria: importing into the image store: %s", uri);
    log = memfd_create("hydria-store", MFD_CLOEXEC);
    marks = memfd_create("hydria-store-marks", MFD_CLOEXEC);
    snprintf(marks_arg, sizeof marks_arg, "--marks-fd=%d", marks);
    if (log >= 0 && marks >= 0 && account_identity(owner, owner->pw_gid, &account) == 0)
        child = run_hydria(argv, &account, log, (int[]){marks, -1}, owner->pw_dir, 0);
    free(account.groups);
    if (child > 0) {
        status = wait_for(child, 0);
        char *said = read_all(marks);  /* "@log" lines: this node waits for another's import, or took it over */
        for (const char *line = said; line && *line;) {
            const char *end = strchrnul(line, '\n');
            log_mark(line, (int)(end - line));
            line = *end ? end + 1 : end;
        }
        free(said);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        char *said = log >= 0 ? read_all(log) : NULL;
        char why[1024];
        failure_summary(said, status, why, sizeof why);
        /* The step's log (the user sees why the job imports the image itself) and slurmd's (the
         * administrator sees what to fix in the store). */
        slurm_spank_log("hydria: the image store could not import %s: %s; importing it for this job", uri, why);
        slurm_error("hydria: the image store (written as %s) could not import %s: %s", store_owner, uri, why);
        free(said);
    }
    if (log >= 0)
        close(log);
    if (marks >= 0)
        close(marks);
}

/* Forget a running container that ended before the step could take hold of it. */
static void release_snapshot(void)
{
    for (size_t i = 0; i < NAMESPACE_COUNT; i++)
        if (namespace_fds[i] >= 0) {
            close(namespace_fds[i]);
            namespace_fds[i] = -1;
        }
    free(holder_environ);
    holder_environ = NULL;
}

int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
    char ids[64], *script = NULL;

    (void)ac;
    (void)av;
    if (!wanted(sp) || !step_argument(sp, ids, sizeof ids))
        return 0;
    if (!getcwd(step_cwd, sizeof step_cwd))
        step_cwd[0] = '\0';
    int argc = 0;
    char **argv = NULL;
    if (strstr(ids, ".batch") && spank_get_item(sp, S_JOB_ARGV, &argc, &argv) == ESPANK_SUCCESS && argc > 0 &&
        asprintf(&script, "--batch-script=%s", argv[0]) < 0)
        script = NULL;
    if (store_owner && store_trees)
        mount_store_trees(sp, ids);
    start_container(sp, ids, script, NULL, NULL);
    if (store_request) {
        fill_store(store_request);
        free(store_request);
        store_request = NULL;
        start_container(sp, ids, script, NULL, "--no-store-fill");
    }
    if (attached && start_error && holder > 0) {  /* it ended meanwhile: start a container of our own */
        release_snapshot();
        free(start_error);
        start_error = NULL;
        holder = -1;
        attached = 0;
        start_container(sp, ids, script, "--no-attach", "--no-store-fill");
    }
    if (holder > 0 && !start_error) {
        started = mmap(NULL, sizeof *started, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (started == MAP_FAILED)
            started = NULL;
    }
    free(script);
    return 0;
}

/* setns into each of the holder's namespaces that differs from this task's. */
/* Join the container's namespaces, those the task does not share already. Sets *privileged when
 * the container has no user namespace of its own (root with HYDRIA_ALLOW_SUPERUSER). */
static int join_all(int *privileged)
{
    char self[64];
    struct stat theirs, ours;
    *privileged = 0;
    for (size_t i = 0; i < NAMESPACE_COUNT; i++) {
        int fd = namespace_fds[i];
        snprintf(self, sizeof self, "/proc/self/ns/%s", NAMESPACES[i].name);
        if (fd < 0 || fstat(fd, &theirs) < 0)
            continue;  /* only cgroup may be missing (snapshot) */
        if (stat(self, &ours) == 0 && theirs.st_ino == ours.st_ino && theirs.st_dev == ours.st_dev) {
            *privileged |= NAMESPACES[i].type == CLONE_NEWUSER;
            continue;
        }
        if (setns(fd, NAMESPACES[i].type) < 0) {
            slurm_error("hydria: cannot join the container's %s namespace: %s", NAMESPACES[i].name, strerror(errno));
            return -1;
        }
    }
    return 0;
}

/* The container's variables over the task's, by the plan's rules (the first "@env-keep NAME",
 * "@env-keep-prefix PREFIX" or "@env-skip-prefix PREFIX" that matches): kept ones only where the
 * task has none, skipped ones never, the others always. */
static void merge_container_environment(spank_t sp)
{
    for (char *entry = holder_environ; entry && *entry; entry += strlen(entry) + 1) {
        char *equals = strchr(entry, '=');
        if (!equals)
            continue;
        *equals = '\0';
        int rule = 's';  /* set */
        for (const char *line = env_plan; line && *line && rule == 's';) {
            const char *end = strchrnul(line, '\n');
            size_t length = (size_t)(end - line), name = strlen(entry);
            if (length == 10 + name && strncmp(line, "@env-keep ", 10) == 0 && strncmp(line + 10, entry, name) == 0)
                rule = 'k';
            else if (strncmp(line, "@env-keep-prefix ", 17) == 0 && length - 17 <= name &&
                     strncmp(line + 17, entry, length - 17) == 0)
                rule = 'k';
            else if (strncmp(line, "@env-skip-prefix ", 17) == 0 && length - 17 <= name &&
                     strncmp(line + 17, entry, length - 17) == 0)
                rule = 'x';
            line = *end ? end + 1 : end;
        }
        if (rule != 'x')
            spank_setenv(sp, entry, equals + 1, rule == 's');
        *equals = '=';
    }
}

static int task_has(spank_t sp, const char *name)
{
    char value[8];
    return spank_getenv(sp, name, value, sizeof value) != ESPANK_ENV_NOEXIST;
}

/* The task's environment, as `hydria slurm start` planned it ("@env-..." marks, in order; see
 * hydria/slurm/task_env.py): the shim decides nothing here. */
static void apply_env_plan(spank_t sp)
{
    static char value[65536];
    char line[8192];
    int active = 1;
    for (const char *next = env_plan; next && *next;) {
        const char *end = strchrnul(next, '\n');
        snprintf(line, sizeof line, "%.*s", (int)(end - next), next);
        next = *end ? end + 1 : end;
        char *argument = strchr(line, ' '), *equals = argument ? strchr(argument, '=') : NULL;
        if (argument)
            *argument++ = '\0';
        if (equals)
            *equals++ = '\0';
        if (strcmp(line, "@env-end") == 0)
            active = 1;
        else if (!active)
            continue;
        else if (strcmp(line, "@env-if") == 0 && argument)
            active = task_has(sp, argument);
        else if (strcmp(line, "@env-unset") == 0 && argument)
            spank_unsetenv(sp, argument);
        else if (strcmp(line, "@env-merge") == 0)
            merge_container_environment(sp);
        else if (strcmp(line, "@env-default") == 0 && equals && !task_has(sp, argument))
            spank_setenv(sp, argument, equals, 0);
        else if (equals && (!strcmp(line, "@env-copy") || (!strcmp(line, "@env-copy-default") && !task_has(sp, argument))) &&
                 spank_getenv(sp, equals, value, sizeof value) == ESPANK_SUCCESS)
            spank_setenv(sp, argument, value, 1);
    }
}

/* enroot's and pyxis's seccomp filter, the program hydria/runtime/seccomp.py installs for `hydria
 * start` (hydria_generated.h has it for the machines it knows): in the container's one-uid user
 * namespace, calls that change owners or ids succeed without doing anything, so that package
 * managers work. Installed with the capabilities the task holds in that namespace after setns. */
static int install_seccomp(void)
{
#ifdef HYDRIA_SECCOMP_PROGRAM
    struct sock_filter filter[] = {HYDRIA_SECCOMP_PROGRAM};
    struct sock_fprog program = {(unsigned short)(sizeof filter / sizeof filter[0]), filter};
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program);
#else
    return 0;
#endif
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
    const char *dir = *step_workdir ? step_workdir : NULL;

    (void)ac;
    (void)av;
    if (start_error) {  /* one setup failed for every task: said once per node, as pyxis says it */
        uint32_t task = 0;
        if (spank_get_item(sp, S_TASK_ID, &task) != ESPANK_SUCCESS || task == 0)
            for (char *line = strtok(start_error, "\n"); line; line = strtok(NULL, "\n"))
                slurm_error("%s", line);
        return -1;
    }
    if (holder < 0)
        return 0;
    uint32_t local_id = 1;
    if (entrypoint_output && spank_get_item(sp, S_TASK_ID, &local_id) == ESPANK_SUCCESS && local_id == 0)
        for (char *line = strtok(entrypoint_output, "\n"); line; line = strtok(NULL, "\n"))
            fprintf(stderr, "%s\n", line);  /* once per node, in the first task's error stream */
    apply_env_plan(sp);
    int privileged;
    if (join_all(&privileged) < 0)
        return -1;
    if (!dir)
        dir = *holder_cwd ? holder_cwd : "/";
    if (chdir(dir) < 0) {
        slurm_error("hydria: couldn't chdir to %s: %s", dir, strerror(errno));
        return -1;
    }
    if (!privileged && install_seccomp() < 0) {  /* as pyxis: no filter for privileged containers */
        slurm_error("hydria: cannot install the seccomp filter: %s", strerror(errno));
        return -1;
    }
    if (started)
        __atomic_add_fetch(started, 1, __ATOMIC_SEQ_CST);
    return 0;
}

/* Kill the holder and run `hydria slurm cleanup`, once: when the last local task has exited, or at
 * the latest when the step ends. The cleanup runs detached, so that the step ends at once, except
 * with --container-save: the step ends when the image is written, or fails when the export did. */
static int teardown(spank_t sp)
{
    static int done;
    char ids[64];
    uint32_t tasks = 0;
    int log = -1, rc = 0;
    pid_t child = -1;
    struct identity user;

    if (done)
        return 0;
    done = 1;
    if (holder > 0 && !attached) {
        kill(holder, SIGKILL);
        wait_for(holder, 0);
    }
    unmount_store_trees();
    if (holder < 0 && !start_error)
        return 0;
    release_snapshot();  /* the container's mounts go with its last process */
    spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &tasks);
    int export = save_requested && started && *started >= tasks;
    if (!export && !needs_cleanup && !start_error)
        return 0;  /* nothing was left behind: no process to start */
    if (export && (log = memfd_create("hydria-cleanup", MFD_CLOEXEC)) < 0)
        export = 0;
    step_argument(sp, ids, sizeof ids);
    const char *extras[] = {ids, export ? "--export" : NULL};
    if (job_identity(sp, &user) == 0)  /* in the step's directory: a relative --container-save is relative to it */
        child = run_hydria(command("cleanup", extras, 2), &user, export ? log : -1, NULL, *step_cwd ? step_cwd : NULL,
                           export ? 0 : DETACHED);
    if (child > 0) {
        int status = wait_for(child, 0);
        if (export && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
            report(log);
            rc = -1;
        }
    }
    if (log >= 0)
        close(log);
    return rc;
}

int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
    static uint32_t exited;
    uint32_t tasks = 0;

    (void)ac;
    (void)av;
    if (spank_get_item(sp, S_JOB_LOCAL_TASK_COUNT, &tasks) == ESPANK_SUCCESS && ++exited >= tasks)
        return teardown(sp);
    return 0;
}

/* slurmd, as root, when a job ends: with container_scope=job, remove the job's named containers
 * (`hydria slurm epilog` as the job's user). A failure means containers were left behind. */
int slurm_spank_job_epilog(spank_t sp, int ac, char **av)
{
    uid_t uid;
    gid_t gid;
    uint32_t job;
    char ids[64];
    int status, log;
    pid_t child = -1;
    struct passwd *user;
    struct identity account = {0};

    parse_arguments(ac, av);
    if (!job_scope || spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS ||
        spank_get_item(sp, S_JOB_GID, &gid) != ESPANK_SUCCESS || spank_get_item(sp, S_JOB_ID, &job) != ESPANK_SUCCESS)
        return 0;
    snprintf(ids, sizeof ids, "--job=%u", job);
    const char *extras[] = {ids};
    if (!(user = getpwuid(uid)) || account_identity(user, gid, &account) < 0) {
        slurm_error("hydria: job epilog: cannot become user %u: %s", (unsigned)uid, user ? strerror(errno) : "no such user");
        free(account.groups);
        return -1;
    }
    if ((log = memfd_create("hydria-epilog", MFD_CLOEXEC)) >= 0)
        child = run_hydria(command("epilog", extras, 1), &account, log, NULL, NULL, 0);
    free(account.groups);
    if (child < 0) {
        if (log >= 0)
            close(log);
        return -1;
    }
    status = wait_for(child, 0);
    if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
        report(log);
    close(log);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
    (void)ac;
    (void)av;
    if (spank_remote(sp))
        return teardown(sp);
    return 0;
}
