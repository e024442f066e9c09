/*
 * hydria-squashfuse: serves squashfs images read-only over FUSE, for hydria's containers: one
 * image, or the layer images of a layered image, each on a mount of its own (the container's
 * overlay stacks them), all served by this one process.
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
 * With HYDRIA_READ_LOG_FD=N in its environment it tells the read cache which files programs
 * read (container/read_cache.py): once the bytes read from a regular file reach half its size, it
 * writes the line "IMAGE INODE" (the image's place on the command line, from 0, and the file's
 * squashfs inode number) to descriptor N, once per file. A file read in part (one page of a large
 * library) is never named: the read cache keeps at most twice what programs read.
 *
 * Usage (as hydria runs it): hydria-squashfuse -f [-o uid=N,gid=N] IMAGE /dev/fd/N [IMAGE /dev/fd/N]...
 * It ends when every mount has gone.
 *
 * hydria-squashfuse --paths IMAGE: the paths of IMAGE's regular files whose inode numbers
 * standard input lists (one per line), each "MODE SIZE PATH" (MODE in octal: the type and every
 * permission bit; PATH from the image's top), ended by a NUL byte; every name of a file
 * with hard links; then each folder that holds one, with a SIZE of 0, after what it holds.
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
#ifdef SQFS_MULTITHREADED
#include <pthread.h>
#endif
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
/* Images one daemon serves at most: the kernel's overlay stacks no more lower layers. */
enum { MAX_IMAGES = 500 };

struct options {
	unsigned int uid;
	unsigned int gid;
	int count;                        /* images, each with its mount point */
	const char *image[MAX_IMAGES];
	const char *mountpoint[MAX_IMAGES];
	int dangling;                     /* an image without a mount point, or one too many */
};

/* One image served on one mount: the library's state is each session's own (its user data). */
struct served {
	sqfs_ll *ll;
	struct fuse_session *session;
	int has_xattrs;
	int read_error_reported;
	uint64_t *bytes_read;   /* by inode number, with the read log; NAMED once it is written */
	uint32_t inodes;        /* the image's inode count: inode numbers run from 1 to it */
};

/* bytes_read of a file whose line the read log has. */
#define NAMED UINT64_MAX

static struct options opts;
static struct served served[MAX_IMAGES];
static int kernel_opens;          /* 0 once the kernel handles opens itself (FUSE_NO_OPEN) */
static int kernel_opens_dirs;     /* 0 once it opens directories itself and keeps their listings */
static int read_log = -1;         /* HYDRIA_READ_LOG_FD: where the files programs read are named */

/* The image whose library state is `ll`. */
static int image_of(const sqfs_ll *ll)
{
	int i;

	for (i = 0; i < opts.count; i++)
		if (served[i].ll == ll)
			return i;
	return 0;
}

static void report_read_error(const sqfs_ll *ll, const char *what)
{
	int i = image_of(ll);

	if (served[i].read_error_reported)
		return;
	served[i].read_error_reported = 1;
	fprintf(stderr, "hydria-squashfuse: %s: cannot read %s: the image is damaged or cut short "
		"(programs get an I/O error); import it again\n", opts.image[i], what);
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
		report_read_error(ll, "an inode");
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
		report_read_error(lli.ll, "an inode");
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
		report_read_error(lli.ll, "a directory");
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
		report_read_error(lli->ll, "a directory");
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

/* Count `length` bytes read from `file`; name it in the read log once they reach half its size.
 * A line the log could not take is written at the file's next read. */
static void note_read(const sqfs_ll *ll, const sqfs_inode *file, uint64_t length)
{
	struct served *image = &served[image_of(ll)];
	sqfs_inode_num number = file->base.inode_number;
	uint64_t *count, total;
	char line[32];
	int size;

	if (image->bytes_read == NULL || number < 1 || number > image->inodes || !S_ISREG(file->base.mode))
		return;
	count = &image->bytes_read[number];
	if (__atomic_load_n(count, __ATOMIC_RELAXED) == NAMED)
		return;
	total = __atomic_add_fetch(count, length, __ATOMIC_RELAXED);
	if (total < (uint64_t)file->xtra.reg.file_size / 2 + 1)
		return;
	size = snprintf(line, sizeof(line), "%d %u\n", image_of(ll), (unsigned int)number);
	if (write(read_log, line, (size_t)size) == size)
		__atomic_store_n(count, NAMED, __ATOMIC_RELAXED);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, struct fuse_file_info *fi)
{
	sqfs_ll *ll = fuse_req_userdata(req);
	sqfs_inode inode, *file = (sqfs_inode *)(intptr_t)fi->fh; /* NULL without opens */
	off_t length = (off_t)size;
	char *buf;

	if (file == NULL) {
		if (sqfs_ll_inode(ll, &inode, ino) != SQFS_OK) {
			report_read_error(ll, "an inode");
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
		report_read_error(ll, "a file's data");
		fuse_reply_err(req, EIO);
	} else {
		fuse_reply_buf(req, buf, (size_t)length);
		note_read(ll, file, (uint64_t)length);
	}
	free(buf);
}

/* Whether the image that `req` asks about holds extended attributes (a layer image's opaque
 * folders do: the overlay reads them). */
static int has_xattrs(fuse_req_t req)
{
	return served[image_of(fuse_req_userdata(req))].has_xattrs;
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	if (!has_xattrs(req)) {
		fuse_reply_err(req, ENOSYS); /* the kernel stops asking */
		return;
	}
	sqfs_ll_op_getxattr(req, ino, name, size);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	if (!has_xattrs(req)) {
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
	if (o->count == MAX_IMAGES) {
		o->dangling = 1;
		return -1;
	}
	if (!o->dangling) {
		o->image[o->count] = arg;
		o->dangling = 1;
	} else {
		o->mountpoint[o->count++] = arg;
		o->dangling = 0;
	}
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

/* Answer one request of image `i` if one is waiting; 1 when it did, 0 when none was there, -1
 * when its mount has gone (or failed: `*status` says how). */
static int serve_one(int i, struct fuse_buf *request, int *status)
{
	int received = fuse_session_receive_buf(served[i].session, request);

	if (received > 0) {
		fuse_session_process_buf(served[i].session, request);
		return 1;
	}
	if (received == -EAGAIN || received == -EINTR)
		return 0;
	if (received < 0)
		*status = received;
	return -1; /* 0: unmounted, the session has exited */
}

/* fuse_session_loop over every image's session, except that after each request it keeps asking
 * for the next for SPIN_NS where a CPU is to spare, and stops as soon as another task wants its
 * CPU. A daemon asleep costs each request a wake-up of its CPU: tens of microseconds on a virtual
 * machine's idle CPU, more than serving a small file. Asleep, it waits in poll() for the next
 * request or the end of a mount. The session that answered last is asked first. */
static int serve(void)
{
	struct fuse_buf request = {.mem = NULL};
	struct pollfd devices[MAX_IMAGES];
	int loadavg = -1, cpus = 1, status = 0, open_mounts = opts.count, spinnable = 1, last = 0, i;
	long long spin_until = 0;
	long preempted = 0; /* set after each request */
	cpu_set_t allowed;

	for (i = 0; i < opts.count; i++) {
		devices[i].fd = fuse_session_fd(served[i].session);
		devices[i].events = POLLIN;
		if (fcntl(devices[i].fd, F_SETFL, fcntl(devices[i].fd, F_GETFL) | O_NONBLOCK) != 0)
			spinnable = 0; /* it then reads a session only when poll() says it has a request */
	}
	/* Without either, it never spins: it sleeps after every request. */
	if (spinnable)
		loadavg = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
	if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0)
		cpus = CPU_COUNT(&allowed);
	while (open_mounts > 0) {
		int ready;

		if (spin_until != 0 && devices[last].fd >= 0) {
			/* The image that answered last is asked directly: a program's next request is
			 * most often for it, and a poll() first would cost each request one call more.
			 * The others are polled when it has none. */
			int answered = serve_one(last, &request, &status);

			if (answered > 0) {
				spin_until = cpu_to_spare(loadavg, cpus) ? now_ns() + SPIN_NS : 0;
				preempted = preemptions();
				continue;
			}
			if (answered < 0) {
				devices[last].fd = -1;
				open_mounts--;
				continue;
			}
			if (open_mounts == 1) { /* no other image to poll */
				if (preemptions() != preempted || now_ns() > spin_until)
					spin_until = 0;
				continue;
			}
		}
		ready = poll(devices, opts.count, spin_until != 0 ? 0 : -1);
		if (ready < 0 && errno != EINTR) {
			status = -errno;
			break;
		}
		if (ready <= 0) {
			if (spin_until != 0 && (preemptions() != preempted || now_ns() > spin_until))
				spin_until = 0;
			continue;
		}
		for (i = 0; i < opts.count; i++) {
			int answered;

			if (devices[i].fd < 0 || devices[i].revents == 0)
				continue;
			last = i;
			while ((answered = serve_one(i, &request, &status)) > 0 && spinnable)
				; /* the next request of the same image, if it is there already */
			if (answered < 0) {
				devices[i].fd = -1; /* poll() passes it over from now on */
				open_mounts--;
			}
		}
		spin_until = loadavg >= 0 && cpu_to_spare(loadavg, cpus) ? now_ns() + SPIN_NS : 0;
		preempted = preemptions();
	}
	free(request.mem);
	if (loadavg >= 0)
		close(loadavg);
	for (i = 0; i < opts.count; i++)
		fuse_session_reset(served[i].session);
	return status;
}
#else
static void *serve_image(void *session)
{
	struct fuse_loop_config loop = {.clone_fd = 0, .max_idle_threads = 10};

	return (void *)(intptr_t)fuse_session_loop_mt(session, &loop);
}

/* Each image's session served by the library's threads, until every mount has gone. */
static int serve(void)
{
	pthread_t threads[MAX_IMAGES];
	int status = 0, i;
	void *result;

	for (i = 1; i < opts.count; i++)
		if (pthread_create(&threads[i], NULL, serve_image, served[i].session) != 0)
			return -errno;
	status = (int)(intptr_t)serve_image(served[0].session);
	for (i = 1; i < opts.count; i++)
		if (pthread_join(threads[i], &result) == 0 && (intptr_t)result != 0)
			status = (int)(intptr_t)result;
	return status;
}
#endif

/* Open image `i` and mount its session; 0, or 1 after saying why not. */
static int open_image(int i, struct fuse_args *args, const struct fuse_lowlevel_ops *ops)
{
	struct fuse_args own = FUSE_ARGS_INIT(0, NULL);
	sqfs_ll *ll = sqfs_ll_open(opts.image[i], 0); /* says why on standard error when it cannot */
	int k;

	if (ll == NULL)
		return 1;
	served[i].ll = ll;
	if (enlarge_caches(&ll->fs) != 0) {
		fprintf(stderr, "hydria-squashfuse: out of memory for its caches\n");
		return 1;
	}
#ifdef OWN_ZSTD_CONTEXT
	if (ll->fs.sb.compression == ZSTD_COMPRESSION)
		ll->fs.decompressor = zstd_decompress;
#endif
	served[i].has_xattrs = ll->fs.sb.xattr_id_table_start != (uint64_t)SQUASHFS_INVALID_BLK;
	served[i].inodes = ll->fs.sb.inodes;
	if (read_log >= 0 && (served[i].bytes_read = calloc((size_t)served[i].inodes + 1, sizeof(uint64_t))) == NULL) {
		fprintf(stderr, "hydria-squashfuse: out of memory for its read log\n");
		return 1;
	}
	for (k = 0; k < args->argc; k++) /* each session parses the options afresh */
		if (fuse_opt_add_arg(&own, args->argv[k]) != 0)
			return 1;
	served[i].session = fuse_session_new(&own, ops, sizeof(*ops), ll);
	fuse_opt_free_args(&own);
	if (served[i].session == NULL)
		return 1;
	return fuse_session_mount(served[i].session, opts.mountpoint[i]) != 0;
}

static void close_images(void)
{
	int i;

	for (i = 0; i < opts.count; i++) {
		if (served[i].session != NULL) {
			fuse_session_unmount(served[i].session);
			fuse_session_destroy(served[i].session);
		}
		if (served[i].ll != NULL) {
			sqfs_ll_destroy(served[i].ll);
			free(served[i].ll);
		}
		free(served[i].bytes_read);
	}
}

/* The read log's descriptor from HYDRIA_READ_LOG_FD, or -1. */
static int read_log_descriptor(void)
{
	const char *value = getenv("HYDRIA_READ_LOG_FD");
	char *end;
	long fd;

	if (value == NULL || *value == '\0')
		return -1;
	fd = strtol(value, &end, 10);
	if (*end != '\0' || fd < 3 || fd > INT32_MAX || fcntl((int)fd, F_GETFD) == -1)
		return -1;
	return (int)fd;
}

/* Which inode numbers standard input lists: a table by number (1 for each), or NULL. */
static unsigned char *wanted_inodes(uint32_t inodes)
{
	unsigned char *wanted = calloc((size_t)inodes + 1, 1);
	unsigned long number;

	if (wanted == NULL)
		return NULL;
	while (scanf("%lu", &number) == 1)
		if (number >= 1 && number <= inodes)
			wanted[number] = 1;
	return wanted;
}

/* Print "MODE SIZE PATH\0" for each wanted regular file below `folder`, whose path is `path`
 * (`length` bytes, in a buffer of PATH_BYTES), and after them each folder that holds one. The
 * number of lines printed, or -1 when the image could not be read. */
enum { PATH_BYTES = 65536 };
static long print_wanted(sqfs *fs, sqfs_inode *folder, char *path, size_t length, const unsigned char *wanted,
			 uint32_t inodes)
{
	sqfs_dir dir;
	sqfs_name name;
	sqfs_dir_entry entry;
	sqfs_err err = SQFS_OK;
	sqfs_inode child;
	long printed = 0, below;

	if (sqfs_dir_open(fs, folder, &dir, 0) != SQFS_OK)
		return -1;
	sqfs_dentry_init(&entry, name);
	while (sqfs_dir_next(fs, &dir, &entry, &err)) {
		size_t size = sqfs_dentry_name_size(&entry);
		sqfs_inode_num number = sqfs_dentry_inode_num(&entry);
		int is_dir = sqfs_dentry_is_dir(&entry);

		if (!is_dir && !(S_ISREG(sqfs_dentry_mode(&entry)) && number >= 1 && number <= inodes && wanted[number]))
			continue;
		if (length + size + 2 > PATH_BYTES)
			continue; /* deeper than any path the kernel resolves */
		if (sqfs_inode_get(fs, &child, sqfs_dentry_inode(&entry)) != SQFS_OK)
			return -1;
		memcpy(path + length, sqfs_dentry_name(&entry), size);
		path[length + size] = '\0';
		if (is_dir) {
			path[length + size] = '/';
			below = print_wanted(fs, &child, path, length + size + 1, wanted, inodes);
			if (below < 0)
				return -1;
			path[length + size] = '\0';
			if (below == 0)
				continue;
			printed += below;
			printf("%o 0 %s%c", (unsigned int)child.base.mode, path, '\0');
		} else {
			printf("%o %llu %s%c", (unsigned int)child.base.mode,
			       (unsigned long long)child.xtra.reg.file_size, path, '\0');
		}
		printed++;
	}
	return err == SQFS_OK ? printed : -1;
}

/* hydria-squashfuse --paths IMAGE (see the top); the exit status. */
static int print_paths(const char *image)
{
	sqfs fs;
	sqfs_inode root;
	unsigned char *wanted;
	char *path = malloc(PATH_BYTES);
	int status = 1;

	if (path == NULL || sqfs_open_image(&fs, image, 0) != SQFS_OK) /* it says why */
		return 1;
	wanted = wanted_inodes(fs.sb.inodes);
	if (wanted != NULL && sqfs_inode_get(&fs, &root, fs.sb.root_inode) == SQFS_OK
	    && print_wanted(&fs, &root, path, 0, wanted, fs.sb.inodes) >= 0)
		status = 0;
	else
		fprintf(stderr, "hydria-squashfuse: %s: cannot read its directories: the image is damaged or cut short\n",
			image);
	if (fflush(stdout) != 0)
		status = 1;
	free(wanted);
	free(path);
	sqfs_destroy(&fs);
	return status;
}

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
	int status = 1, i;

	if (argc == 3 && strcmp(argv[1], "--paths") == 0)
		return print_paths(argv[2]);
	read_log = read_log_descriptor();
	opts.uid = IMAGE_OWNERS;
	opts.gid = IMAGE_OWNERS;
	if (fuse_opt_parse(&args, &opts, spec, take_argument) == -1 || opts.count == 0 || opts.dangling) {
		fprintf(stderr, "usage: %s [-f] [-o uid=N,gid=N] IMAGE MOUNTPOINT [IMAGE MOUNTPOINT]... "
			"(%d images at most)\n", argv[0], MAX_IMAGES);
		return 2;
	}
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

	for (i = 0; i < opts.count; i++)
		if (open_image(i, &args, &ops) != 0)
			break;
	/* Until the kernel ends every connection: the last process of the container has gone. */
	if (i == opts.count)
		status = serve() < 0 ? 1 : 0;
	close_images();
	fuse_opt_free_args(&args);
	return status;
}
