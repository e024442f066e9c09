/*
 * hydria-squashfuse: serves one squashfs image read-only over FUSE, for hydria's containers.
 *
 * Built by `hydria install-reader` against the node's libsquashfuse (its low-level library, as
 * Charliecloud's ch-run links it) and libfuse 3. What it adds to the library's own operations,
 * and why (docs/performance.md has the measurements):
 *
 *   - every file is owned by the uid and gid given (-o uid=N,gid=N, as squashfuse's), so that the
 *     one id a user namespace maps owns the image and the overlay above can copy files up;
 *     without them, as the image says (a build's namespace that maps its subordinate IDs);
 *   - READDIRPLUS: a directory listing carries each entry's attributes, so the lookups that follow
 *     a listing (tar, Python's import system, find) cost no request each;
 *   - no OPEN, FLUSH or RELEASE requests where the kernel can do without them (FUSE_NO_OPEN), and
 *     no xattr requests for an image that holds no extended attributes;
 *   - no OPENDIR or RELEASEDIR requests either (FUSE_NO_OPENDIR), which also has the kernel keep
 *     each listing in its page cache: a folder that every rank's Python lists is listed once;
 *   - entries and attributes cached for good, symlinks in the page cache: the image never changes;
 *   - larger block caches than the library's (1 data block, 3 fragment blocks, 8 metadata blocks
 *     in squashfuse 0.1): small files read out of the image's order decompress a fragment block
 *     each time it left the cache, which is most of the daemon's time;
 *   - one zstd decompression context for the daemon's life, where it is built with libzstd
 *     (HYDRIA_ZSTD): the library makes and frees one for every block it decompresses;
 *   - several threads where the library is built for them (squashfuse 0.5 and newer);
 *   - single-threaded, it keeps asking for the next request for a millisecond after each one
 *     instead of sleeping at once, where the node has a CPU to spare: a program reading the image
 *     then no longer waits for the daemon's sleeping CPU to wake up for each of its requests.
 *     Where the runnable tasks outnumber the CPUs it may use, or another task wants its CPU, it
 *     sleeps at once, as before: spinning would take a CPU from the programs themselves.
 *
 * A read that fails (a truncated or damaged image) answers EIO to the program and says once on
 * standard error which image it was; the daemon never stops serving the rest of the image.
 *
 * Usage (as hydria runs it): hydria-squashfuse -f [-o uid=N,gid=N] IMAGE /dev/fd/N
 */
#define _GNU_SOURCE /* CPU_COUNT, RUSAGE_THREAD */
#define FUSE_USE_VERSION 32

#include <squashfuse/cache.h>
#include <squashfuse/ll.h>
#if defined(HYDRIA_ZSTD) && !defined(SQFS_MULTITHREADED)
#define OWN_ZSTD_CONTEXT 1 /* one thread: one context (threads would each need their own) */
#include <zstd.h>
#endif

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/resource.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* In the library, but its header (stat.h) is not installed. */
sqfs_err sqfs_stat(sqfs *fs, sqfs_inode *inode, struct stat *st);

/* Seconds the kernel may keep entries and attributes: the image never changes. */
static const double FOREVER = 1e9;
/* Blocks each cache holds: about 5 MiB in all with 128 KiB blocks. */
enum { FRAGMENT_BLOCKS = 32, DATA_BLOCKS = 8, METADATA_BLOCKS = 64 };
/* Nanoseconds it keeps asking for the next request after one (single-threaded only). */
enum { SPIN_NS = 1000000 };

struct options {
	unsigned int uid;
	unsigned int gid;
	const char *image;
	const char *mountpoint;
};

static struct options opts;
static int kernel_opens;          /* 0 once the kernel handles opens itself (FUSE_NO_OPEN) */
static int kernel_opens_dirs;     /* 0 once it opens directories itself and keeps their listings */
static int image_has_xattrs;
static int read_error_reported;

static void report_read_error(const char *what)
{
	if (read_error_reported)
		return;
	read_error_reported = 1;
	fprintf(stderr, "hydria-squashfuse: %s: cannot read %s: the image is damaged or cut short "
		"(programs get an I/O error); import it again\n", opts.image, what);
}

#define IMAGE_OWNERS ((unsigned int)-1) /* no -o uid=/gid=: the image's own */

static void own(struct stat *st)
{
	if (opts.uid != IMAGE_OWNERS)
		st->st_uid = opts.uid;
	if (opts.gid != IMAGE_OWNERS)
		st->st_gid = opts.gid;
}

/* The entry for `entry` (found in a directory) with its attributes; 0, or an errno. */
static int fill_entry(sqfs_ll *ll, sqfs_dir_entry *entry, struct fuse_entry_param *param)
{
	sqfs_inode inode;

	memset(param, 0, sizeof(*param));
	if (sqfs_inode_get(&ll->fs, &inode, sqfs_dentry_inode(entry)) != SQFS_OK
	    || sqfs_stat(&ll->fs, &inode, &param->attr) != SQFS_OK) {
		report_read_error("an inode");
		return EIO;
	}
	param->attr_timeout = param->entry_timeout = FOREVER;
	param->ino = ll->ino_register(ll, entry);
	param->attr.st_ino = param->ino;
	own(&param->attr);
	return 0;
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	(void)userdata;
	if (conn->capable & FUSE_CAP_CACHE_SYMLINKS)
		conn->want |= FUSE_CAP_CACHE_SYMLINKS;
	kernel_opens = (conn->capable & FUSE_CAP_NO_OPEN_SUPPORT) == 0;
	kernel_opens_dirs = (conn->capable & FUSE_CAP_NO_OPENDIR_SUPPORT) == 0;
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	sqfs_ll_i lli;
	struct stat st;

	(void)fi;
	if (sqfs_ll_iget(req, &lli, ino) != SQFS_OK)
		return; /* it answered */
	if (sqfs_stat(&lli.ll->fs, &lli.inode, &st) != SQFS_OK) {
		report_read_error("an inode");
		fuse_reply_err(req, EIO);
		return;
	}
	st.st_ino = ino;
	own(&st);
	fuse_reply_attr(req, &st, FOREVER);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	sqfs_ll_i lli;
	sqfs_name namebuf;
	sqfs_dir_entry entry;
	struct fuse_entry_param param;
	bool found;
	int err;

	if (sqfs_ll_iget(req, &lli, parent) != SQFS_OK)
		return;
	if (!S_ISDIR(lli.inode.base.mode)) {
		fuse_reply_err(req, ENOTDIR);
		return;
	}
	sqfs_dentry_init(&entry, namebuf);
	if (sqfs_dir_lookup(&lli.ll->fs, &lli.inode, name, strlen(name), &entry, &found) != SQFS_OK) {
		report_read_error("a directory");
		fuse_reply_err(req, EIO);
		return;
	}
	if (!found) { /* a negative entry, cached as long as the others */
		memset(&param, 0, sizeof(param));
		param.entry_timeout = FOREVER;
		fuse_reply_entry(req, &param);
		return;
	}
	err = fill_entry(lli.ll, &entry, &param);
	if (err)
		fuse_reply_err(req, err);
	else
		fuse_reply_entry(req, &param);
}

/* The entries of directory `ino` from `offset` on, as many as `size` bytes hold; with `plus`,
 * each with its attributes. */
static void list_directory(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset,
			   struct fuse_file_info *fi, int plus)
{
	sqfs_ll_i own_lli, *lli = (sqfs_ll_i *)(intptr_t)fi->fh; /* made by the library's opendir */
	sqfs_dir dir;
	sqfs_name namebuf;
	sqfs_dir_entry entry;
	sqfs_err err = SQFS_OK;
	struct fuse_entry_param param; /* an entry with its attributes (plus) */
	struct stat type;              /* an entry's inode number and type (plain) */
	char *buf, *pos;
	int failed = 0;

	if (lli == NULL) { /* the kernel opened the directory itself */
		if (sqfs_ll_iget(req, &own_lli, ino) != SQFS_OK)
			return; /* it answered */
		lli = &own_lli;
	}
	if (sqfs_dir_open(&lli->ll->fs, &lli->inode, &dir, offset) != SQFS_OK) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	buf = pos = malloc(size);
	if (buf == NULL) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	sqfs_dentry_init(&entry, namebuf);
	while (sqfs_dir_next(&lli->ll->fs, &dir, &entry, &err)) {
		const char *name = sqfs_dentry_name(&entry);
		off_t next = sqfs_dentry_next_offset(&entry);
		size_t used;

		if (plus) {
			/* Measure first: an entry handed to the kernel counts as looked up. */
			if (fuse_add_direntry_plus(req, NULL, 0, name, NULL, 0) > size)
				break;
			if (fill_entry(lli->ll, &entry, &param) != 0) {
				failed = 1;
				break;
			}
			used = fuse_add_direntry_plus(req, pos, size, name, &param, next);
		} else {
			memset(&type, 0, sizeof(type));
			type.st_ino = lli->ll->ino_fuse_num(lli->ll, &entry);
			type.st_mode = sqfs_dentry_mode(&entry);
			used = fuse_add_direntry(req, pos, size, name, &type, next);
			if (used > size)
				break;
		}
		pos += used;
		size -= used;
	}
	if (err != SQFS_OK)
		report_read_error("a directory");
	if ((failed || err != SQFS_OK) && pos == buf)
		fuse_reply_err(req, EIO);
	else /* what was read; the next call starts after it and meets the error again */
		fuse_reply_buf(req, buf, pos - buf);
	free(buf);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset,
		       struct fuse_file_info *fi)
{
	list_directory(req, ino, size, offset, fi, 0);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset,
			   struct fuse_file_info *fi)
{
	list_directory(req, ino, size, offset, fi, 1);
}

/* Without OPENDIR, the kernel keeps each listing in its page cache (FOPEN_CACHE_DIR, its default
 * then): a directory that many processes list (every rank's Python) is read from the image once. */
static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (!kernel_opens_dirs) {
		fuse_reply_err(req, ENOSYS);
		return;
	}
	sqfs_ll_op_opendir(req, ino, fi);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	if (!kernel_opens) {
		fuse_reply_err(req, ENOSYS); /* the kernel opens files itself from now on */
		return;
	}
	sqfs_ll_op_open(req, ino, fi);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, struct fuse_file_info *fi)
{
	sqfs_ll *ll = fuse_req_userdata(req);
	sqfs_inode inode, *file = (sqfs_inode *)(intptr_t)fi->fh; /* NULL without opens */
	off_t length = (off_t)size;
	char *buf;

	if (file == NULL) {
		if (sqfs_ll_inode(ll, &inode, ino) != SQFS_OK) {
			report_read_error("an inode");
			fuse_reply_err(req, EIO);
			return;
		}
		file = &inode;
	}
	buf = malloc(size ? size : 1);
	if (buf == NULL) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (sqfs_read_range(&ll->fs, file, offset, &length, buf) != SQFS_OK) {
		report_read_error("a file's data");
		fuse_reply_err(req, EIO);
	} else {
		fuse_reply_buf(req, buf, (size_t)length);
	}
	free(buf);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	if (!image_has_xattrs) {
		fuse_reply_err(req, ENOSYS); /* the kernel stops asking */
		return;
	}
	sqfs_ll_op_getxattr(req, ino, name, size);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	if (!image_has_xattrs) {
		fuse_reply_err(req, ENOSYS);
		return;
	}
	sqfs_ll_op_listxattr(req, ino, size);
}

#ifdef OWN_ZSTD_CONTEXT
/* The library's zstd decompressor, with the context kept from one block to the next. */
static sqfs_err zstd_decompress(void *in, size_t insz, void *out, size_t *outsz)
{
	static ZSTD_DCtx *context;
	size_t size;

	if (context == NULL && (context = ZSTD_createDCtx()) == NULL)
		return SQFS_ERR;
	size = ZSTD_decompressDCtx(context, out, *outsz, in, insz);
	if (ZSTD_isError(size))
		return SQFS_ERR;
	*outsz = size;
	return SQFS_OK;
}
#endif

/* Replace the library's small caches (they hold nothing yet). 0, or -1 without memory. */
static int enlarge_caches(sqfs *fs)
{
	sqfs_cache_destroy(&fs->frag_cache);
	sqfs_cache_destroy(&fs->data_cache);
	sqfs_cache_destroy(&fs->md_cache);
	if (sqfs_block_cache_init(&fs->frag_cache, FRAGMENT_BLOCKS) != SQFS_OK
	    || sqfs_block_cache_init(&fs->data_cache, DATA_BLOCKS) != SQFS_OK
	    || sqfs_block_cache_init(&fs->md_cache, METADATA_BLOCKS) != SQFS_OK)
		return -1;
	return 0;
}

static int take_argument(void *data, const char *arg, int key, struct fuse_args *outargs)
{
	struct options *o = data;

	(void)outargs;
	if (key != FUSE_OPT_KEY_NONOPT)
		return 1; /* libfuse's own option: keep it */
	if (o->image == NULL)
		o->image = arg;
	else if (o->mountpoint == NULL)
		o->mountpoint = arg;
	else
		return -1;
	return 0;
}

#ifndef SQFS_MULTITHREADED
static long long now_ns(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return now.tv_sec * 1000000000LL + now.tv_nsec;
}

/* Whether a CPU is to spare: the node's runnable tasks (this daemon and the program it just
 * answered included) are no more than the CPUs this daemon may run on. /proc/loadavg's fourth
 * field is "RUNNABLE/TOTAL". */
static int cpu_to_spare(int loadavg, int cpus)
{
	char text[128], *field;
	ssize_t length = pread(loadavg, text, sizeof(text) - 1, 0);

	if (length <= 0)
		return 0;
	text[length] = '\0';
	field = strchr(text, '/');
	if (field == NULL)
		return 0;
	while (field > text && field[-1] != ' ')
		field--;
	return strtol(field, NULL, 10) <= cpus;
}

/* How often the scheduler has taken the CPU from this thread for another task. */
static long preemptions(void)
{
	struct rusage usage;

	return getrusage(RUSAGE_THREAD, &usage) == 0 ? usage.ru_nivcsw : 0;
}

/* fuse_session_loop, except that after each request it keeps asking for the next for SPIN_NS
 * where a CPU is to spare, and stops as soon as another task wants its CPU. A daemon asleep costs
 * each request a wake-up of its CPU: tens of microseconds on a virtual machine's idle CPU, more
 * than serving a small file. Asleep, it waits in poll() for the next request or the end. */
static int serve(struct fuse_session *session)
{
	struct fuse_buf request = {.mem = NULL};
	struct pollfd device = {.fd = fuse_session_fd(session), .events = POLLIN};
	/* Without either, it never spins: it sleeps after every request. */
	int loadavg = fcntl(device.fd, F_SETFL, fcntl(device.fd, F_GETFL) | O_NONBLOCK) == 0
		? open("/proc/loadavg", O_RDONLY | O_CLOEXEC) : -1;
	int cpus = 1, status = 0;
	long long spin_until = 0;
	long preempted = 0; /* set after each request */
	cpu_set_t allowed;

	if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0)
		cpus = CPU_COUNT(&allowed);
	while (!fuse_session_exited(session)) {
		int received = fuse_session_receive_buf(session, &request);

		if (received > 0) {
			fuse_session_process_buf(session, &request);
			spin_until = loadavg >= 0 && cpu_to_spare(loadavg, cpus) ? now_ns() + SPIN_NS : 0;
			preempted = preemptions();
		} else if (received == -EAGAIN) {
			if (spin_until != 0 && (preemptions() != preempted || now_ns() > spin_until))
				spin_until = 0;
			if (spin_until == 0)
				poll(&device, 1, -1); /* the next request, or the connection's end */
		} else if (received != -EINTR) {
			status = received; /* 0: unmounted, the session has exited */
			break;
		}
	}
	free(request.mem);
	if (loadavg >= 0)
		close(loadavg);
	fuse_session_reset(session);
	return status;
}
#endif

int main(int argc, char *argv[])
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct fuse_opt spec[] = {
		{"uid=%u", offsetof(struct options, uid), 0},
		{"gid=%u", offsetof(struct options, gid), 0},
		FUSE_OPT_KEY("-f", FUSE_OPT_KEY_DISCARD), /* it always stays in the foreground */
		FUSE_OPT_END,
	};
	struct fuse_lowlevel_ops ops;
	struct fuse_session *session;
	sqfs_ll *ll;
	int status;
#ifdef SQFS_MULTITHREADED
	struct fuse_loop_config loop = {.clone_fd = 0, .max_idle_threads = 10};
#endif

	opts.uid = IMAGE_OWNERS;
	opts.gid = IMAGE_OWNERS;
	if (fuse_opt_parse(&args, &opts, spec, take_argument) == -1 || opts.image == NULL
	    || opts.mountpoint == NULL) {
		fprintf(stderr, "usage: %s [-f] [-o uid=N,gid=N] IMAGE MOUNTPOINT\n", argv[0]);
		return 2;
	}
	ll = sqfs_ll_open(opts.image, 0); /* says why on standard error when it cannot */
	if (ll == NULL)
		return 1;
	if (enlarge_caches(&ll->fs) != 0) {
		fprintf(stderr, "hydria-squashfuse: out of memory for its caches\n");
		return 1;
	}
#ifdef OWN_ZSTD_CONTEXT
	if (ll->fs.sb.compression == ZSTD_COMPRESSION)
		ll->fs.decompressor = zstd_decompress;
#endif
	image_has_xattrs = ll->fs.sb.xattr_id_table_start != (uint64_t)SQUASHFS_INVALID_BLK;

	memset(&ops, 0, sizeof(ops));
	ops.init = op_init;
	ops.lookup = op_lookup;
	ops.getattr = op_getattr;
	ops.forget = sqfs_ll_op_forget;
	ops.opendir = op_opendir;
	ops.readdir = op_readdir;
	ops.readdirplus = op_readdirplus;
	ops.releasedir = sqfs_ll_op_releasedir;
	ops.open = op_open;
	ops.read = op_read;
	ops.release = sqfs_ll_op_release;
	ops.readlink = sqfs_ll_op_readlink;
	ops.getxattr = op_getxattr;
	ops.listxattr = op_listxattr;
	ops.statfs = stfs_ll_op_statfs;

	session = fuse_session_new(&args, &ops, sizeof(ops), ll);
	if (session == NULL)
		return 1;
	if (fuse_session_mount(session, opts.mountpoint) != 0) {
		fuse_session_destroy(session);
		return 1;
	}
	/* Until the kernel ends the connection: the last process of the container has gone. */
#ifdef SQFS_MULTITHREADED
	status = fuse_session_loop_mt(session, &loop);
#else
	status = serve(session);
#endif
	fuse_session_unmount(session);
	fuse_session_destroy(session);
	sqfs_ll_destroy(ll);
	free(ll);
	fuse_opt_free_args(&args);
	return status < 0 ? 1 : 0;
}
