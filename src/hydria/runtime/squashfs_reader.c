/*
 * hydria-squashfuse: serves squashfs images read-only over FUSE, for hydria's containers: one
 * image, or the layer images of a layered image merged into one tree on one mount, as the
 * kernel's overlay would stack them (a character device 0/0 deletes its name from the layers
 * below, a folder marked user.overlay.opaque=y hides theirs), with one request per name however
 * many layers the image has.
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
 *     no xattr requests for images that hold no extended attributes;
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
 * The merged tree: a file, and a folder that one layer alone shows, is that layer's inode (its
 * FUSE inode number says which layer, PLAIN_INO); a folder that several layers show is a node of
 * this daemon's, which lists where each of those layers has it, the topmost first, and the merged
 * listing once it was listed. Deletion marks and the overlay's extended attributes never show.
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
 * Usage (as hydria runs it): hydria-squashfuse -f [-o uid=N,gid=N] IMAGE [IMAGE]... /dev/fd/N
 * (the images the lowest first). It ends when the mount has gone.
 *
 * hydria-squashfuse --paths IMAGE [IMAGE]...: the regular files of the merged tree whose "IMAGE
 * INODE" standard input lists (one per line, as the read log names them), each "IMAGE MODE SIZE
 * MTIME PATH" (MODE in octal: the type and every permission bit; PATH from the tree's top), ended
 * by a NUL byte; every name of a file with hard links; then each folder that holds one, as the
 * tree shows it (IMAGE its topmost layer's, SIZE 0), after what it holds; last the top (PATH "").
 *
 * hydria-squashfuse --folders IMAGE [IMAGE]...: for each path that standard input lists (one per
 * line, from the tree's top, "a/b"), one line of what the merged tree has at each of its parts in
 * turn: "d MODE UID GID MTIME" for a folder (MODE in octal, permission bits), "-" for nothing
 * there, "x" for anything else, separated by ";", the line ending after the first that is not a
 * folder. An import asks which of an image's WORKDIR and VOLUME folders its layers lack.
 */
#define _GNU_SOURCE /* CPU_COUNT, RUSAGE_THREAD */
#define FUSE_USE_VERSION 32

#include <cache.h> /* squashfuse's, in the folder pkg-config names */
#include <ll.h>
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
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* In the library, but their headers are not installed. */
sqfs_err sqfs_stat(sqfs *fs, sqfs_inode *inode, struct stat *st);
int sqfs_statfs(sqfs *sq, struct statvfs *st);
int sqfs_listxattr(sqfs *fs, sqfs_inode *inode, char *buf, size_t *size);
int sqfs_enoattr(void);

_Static_assert(sizeof(fuse_ino_t) >= 8, "inode numbers carry the layer: 64-bit systems only");

/* Seconds the kernel may keep entries and attributes: the image never changes. */
static const double FOREVER = 1e9;
/* Blocks each cache holds: about 5 MiB in all with 128 KiB blocks. */
enum { FRAGMENT_BLOCKS = 32, DATA_BLOCKS = 8, METADATA_BLOCKS = 64 };
/* Nanoseconds it keeps asking for the next request after one (single-threaded only). */
enum { SPIN_NS = 1000000 };
/* Images one daemon serves at most (runtime/layered.py's MAX_LAYERS). */
enum { MAX_IMAGES = 500 };
/* FUSE inode numbers: a layer's inode is (layer + 1) << LAYER_SHIFT | its squashfs inode ID (48
 * bits); a merged folder is NODE_BASE + its node's index, the root FUSE_ROOT_ID (node 0). Both
 * stay below 2^58, as the overlay above wants them. */
enum { LAYER_SHIFT = 48 };
/* Layers that have a folder from which a name is found in its merged listing (find_name). */
enum { LISTED_DEPTH = 8 };
static const fuse_ino_t NODE_BASE = (fuse_ino_t)1 << 57;
static const char OPAQUE[] = "user.overlay.opaque";

struct options {
	unsigned int uid;
	unsigned int gid;
	int count;                        /* the images and the mount point, the last */
	const char *argument[MAX_IMAGES + 1];
};

/* One image of the tree, the lowest first. */
struct layer {
	sqfs fs;
	int has_xattrs;
	int read_error_reported;
	uint64_t *bytes_read;   /* by inode number, with the read log; NAMED once it is written */
	uint32_t inodes;        /* the image's inode count: inode numbers run from 1 to it */
};

/* bytes_read of a file whose line the read log has. */
#define NAMED UINT64_MAX

/* Where an inode is: which layer, and its squashfs inode ID there. */
struct place {
	int layer;
	sqfs_inode_id id;
};

/* An entry of a merged folder's listing: its name and what the name stands for. */
struct entry {
	char *name;
	fuse_ino_t ino;
	struct place top;  /* the inode whose attributes it has */
	mode_t type;
	sqfs_inode_num number; /* a file's squashfs inode number, as the read log names it */
};

/* A folder that several layers show: where each has it, the topmost first (down to an opaque
 * one), and its listing, made at its first. */
struct node {
	int depth;
	struct place *places;
	struct entry *listing;
	size_t listed;           /* entries */
	int has_listing;
};

static struct options opts;
static struct layer layers[MAX_IMAGES];
static int layer_count;
static struct fuse_session *session;
static int kernel_opens;          /* 0 once the kernel handles opens itself (FUSE_NO_OPEN) */
static int kernel_opens_dirs;     /* 0 once it opens directories itself and keeps their listings */
static int read_log = -1;         /* HYDRIA_READ_LOG_FD: where the files programs read are named */
static int any_xattrs;            /* whether an image holds extended attributes */

/* The nodes, and a table from each one's topmost place (as PLAIN_INO) to its index + 1. */
static struct node **nodes;
static size_t node_count, node_room;
static struct {
	fuse_ino_t key;
	size_t index;
} *node_table;
static size_t table_room;

#ifdef SQFS_MULTITHREADED
static pthread_mutex_t nodes_lock = PTHREAD_MUTEX_INITIALIZER;
#define LOCK_NODES() pthread_mutex_lock(&nodes_lock)
#define UNLOCK_NODES() pthread_mutex_unlock(&nodes_lock)
#else
#define LOCK_NODES() ((void)0)
#define UNLOCK_NODES() ((void)0)
#endif

static fuse_ino_t PLAIN_INO(struct place place)
{
	return ((fuse_ino_t)(place.layer + 1) << LAYER_SHIFT) | place.id;
}

static void report_read_error(int layer, const char *what)
{
	if (layers[layer].read_error_reported)
		return;
	layers[layer].read_error_reported = 1;
	fprintf(stderr, "hydria-squashfuse: %s: cannot read %s: the image is damaged or cut short "
		"(programs get an I/O error); import it again\n", opts.argument[layer], what);
}

#define IMAGE_OWNERS ((unsigned int)-1) /* no -o uid=/gid=: the image's own */

static void own(struct stat *st)
{
	if (opts.uid != IMAGE_OWNERS)
		st->st_uid = opts.uid;
	if (opts.gid != IMAGE_OWNERS)
		st->st_gid = opts.gid;
}

/* --- The merged tree ------------------------------------------------------------------------ */

static int is_node(fuse_ino_t ino)
{
	return ino == FUSE_ROOT_ID || ino >= NODE_BASE;
}

/* The places of folder (or file) `ino`, the topmost first: its node's, or its own one, which
 * `own` receives. Their count; 0 for an inode number this daemon never gave. */
static int stack_of(fuse_ino_t ino, struct place *own, const struct place **places)
{
	if (is_node(ino)) {
		size_t index = ino == FUSE_ROOT_ID ? 0 : (size_t)(ino - NODE_BASE);
		struct node *node;

		LOCK_NODES();
		node = index < node_count ? nodes[index] : NULL;
		UNLOCK_NODES();
		if (node == NULL)
			return 0;
		*places = node->places;
		return node->depth;
	}
	own->layer = (int)(ino >> LAYER_SHIFT) - 1;
	own->id = ino & (((fuse_ino_t)1 << LAYER_SHIFT) - 1);
	if (own->layer < 0 || own->layer >= layer_count)
		return 0;
	*places = own;
	return 1;
}

/* The node of merged folder `ino` (is_node), which stack_of found. */
static struct node *node_of(fuse_ino_t ino)
{
	struct node *node;

	LOCK_NODES();
	node = nodes[ino == FUSE_ROOT_ID ? 0 : (size_t)(ino - NODE_BASE)];
	UNLOCK_NODES();
	return node;
}

static size_t table_slot(fuse_ino_t key)
{
	return (size_t)((key * 0x9E3779B97F4A7C15ULL) >> 20) & (table_room - 1);
}

/* Index `index` under `key` in the table, which has room. */
static void table_put(fuse_ino_t key, size_t index)
{
	size_t slot = table_slot(key);

	while (node_table[slot].key != 0)
		slot = (slot + 1) & (table_room - 1);
	node_table[slot].key = key;
	node_table[slot].index = index;
}

/* Make the table twice as large; 0, or -1 without memory. */
static int grow_table(void)
{
	size_t old_room = table_room, i;
	typeof(node_table) old = node_table;

	table_room = old_room ? old_room * 2 : 1024;
	node_table = calloc(table_room, sizeof(*node_table));
	if (node_table == NULL) {
		node_table = old;
		table_room = old_room;
		return -1;
	}
	for (i = 0; i < old_room; i++)
		if (old[i].key != 0)
			table_put(old[i].key, old[i].index);
	free(old);
	return 0;
}

/* Make room for twice as many nodes; 0, or -1 without memory. */
static int grow_nodes(void)
{
	size_t room = node_room ? 2 * node_room : 256;
	struct node **more = realloc(nodes, room * sizeof(*nodes));

	if (more == NULL)
		return -1;
	nodes = more;
	node_room = room;
	return 0;
}

static fuse_ino_t node_ino_of(size_t index)
{
	return index == 0 ? FUSE_ROOT_ID : NODE_BASE + index;
}

/* The inode number of the merged folder that `places` (`depth`, the topmost first) make: the node
 * made for it before, or a new one. 0 without memory. */
static fuse_ino_t node_ino(const struct place *places, int depth)
{
	fuse_ino_t key = PLAIN_INO(places[0]), ino = 0;
	struct node *node = NULL;
	size_t slot;

	LOCK_NODES();
	if (table_room > 0)
		for (slot = table_slot(key); node_table[slot].key != 0; slot = (slot + 1) & (table_room - 1))
			if (node_table[slot].key == key) {
				ino = node_ino_of(node_table[slot].index);
				goto done;
			}
	if ((2 * (node_count + 1) > table_room && grow_table() != 0) || (node_count == node_room && grow_nodes() != 0)
	    || (node = calloc(1, sizeof(*node))) == NULL
	    || (node->places = malloc((size_t)depth * sizeof(*places))) == NULL) {
		free(node);
		goto done; /* out of memory */
	}
	memcpy(node->places, places, (size_t)depth * sizeof(*places));
	node->depth = depth;
	nodes[node_count] = node;
	table_put(key, node_count);
	ino = node_ino_of(node_count++);
done:
	UNLOCK_NODES();
	return ino;
}

static int get_inode(struct place place, sqfs_inode *inode)
{
	if (sqfs_inode_get(&layers[place.layer].fs, inode, place.id) == SQFS_OK)
		return 0;
	report_read_error(place.layer, "an inode");
	return EIO;
}

static int is_deletion(const sqfs_inode *inode)
{
	return S_ISCHR(inode->base.mode) && inode->xtra.dev.major == 0 && inode->xtra.dev.minor == 0;
}

/* Whether the folder at `place` hides what lower layers have at its path. */
static int is_opaque(struct place place)
{
	sqfs_inode inode;
	char value[8];
	size_t size = sizeof(value);

	if (!layers[place.layer].has_xattrs || get_inode(place, &inode) != 0
	    || sqfs_xattr_lookup(&layers[place.layer].fs, &inode, OPAQUE, value, &size) != SQFS_OK)
		return 0;
	return size == 1 && value[0] == 'y';
}

/* A name as one layer's folder has it. */
struct candidate {
	struct place place;
	mode_t type;
	sqfs_inode_num number;
};

/* What a name stands for, given what each layer that has it there has (`candidates`, `count`,
 * the topmost first), as the overlay decides: the topmost one, unless it is a deletion (ENOENT),
 * and a folder merged with the folders right below it, down to one that is opaque. 0, or an
 * errno. `found->name` is left as it is. */
static int settle(const struct candidate *candidates, int count, struct entry *found)
{
	struct place folders[MAX_IMAGES];
	int depth = 0;

	if (count < 1)
		return ENOENT;
	found->top = candidates[0].place;
	found->type = candidates[0].type;
	found->number = candidates[0].number;
	if (!S_ISDIR(found->type)) {
		sqfs_inode inode;
		int err;

		if (S_ISCHR(found->type)) {
			if ((err = get_inode(found->top, &inode)) != 0)
				return err;
			if (is_deletion(&inode))
				return ENOENT;
		}
		found->ino = PLAIN_INO(found->top);
		return 0;
	}
	/* A file or a deletion below a folder is hidden by it; an opaque folder hides what is below. */
	do {
		folders[depth] = candidates[depth].place;
		depth++;
	} while (depth < count && S_ISDIR(candidates[depth].type) && !is_opaque(folders[depth - 1]));
	found->ino = depth == 1 ? PLAIN_INO(found->top) : node_ino(folders, depth);
	return found->ino != 0 ? 0 : ENOMEM;
}

/* What `name` stands for in the folder whose places are `stack` (`depth`). 0, ENOENT, or an errno. */
static int lookup_name(const struct place *stack, int depth, const char *name, struct entry *found)
{
	struct candidate candidates[MAX_IMAGES];
	int count = 0, i;

	for (i = 0; i < depth; i++) {
		sqfs *fs = &layers[stack[i].layer].fs;
		sqfs_inode folder;
		sqfs_name namebuf;
		sqfs_dir_entry entry;
		bool hit;

		if (get_inode(stack[i], &folder) != 0)
			return EIO;
		if (!S_ISDIR(folder.base.mode))
			return ENOTDIR;
		sqfs_dentry_init(&entry, namebuf);
		if (sqfs_dir_lookup(fs, &folder, name, strlen(name), &entry, &hit) != SQFS_OK) {
			report_read_error(stack[i].layer, "a directory");
			return EIO;
		}
		if (!hit)
			continue;
		candidates[count].place.layer = stack[i].layer;
		candidates[count].place.id = sqfs_dentry_inode(&entry);
		candidates[count].type = sqfs_dentry_mode(&entry) & S_IFMT;
		candidates[count].number = sqfs_dentry_inode_num(&entry);
		if (!S_ISDIR(candidates[count++].type))
			break; /* it hides what the layers below have */
	}
	return count == 0 ? ENOENT : settle(candidates, count, found);
}

/* A name of one layer's folder, for a merged listing: its candidate and its layer's rank. */
struct listed {
	char *name;
	struct candidate candidate;
	int rank;
};

static int by_name_then_rank(const void *a, const void *b)
{
	const struct listed *x = a, *y = b;
	int order = strcmp(x->name, y->name);

	return order != 0 ? order : x->rank - y->rank;
}

/* Gather every name of each folder of `node` into `*all` (`*count`); 0, or an errno. */
static int gather(const struct node *node, struct listed **all, size_t *count)
{
	size_t room = 0;
	int i;

	*all = NULL;
	*count = 0;
	for (i = 0; i < node->depth; i++) {
		sqfs *fs = &layers[node->places[i].layer].fs;
		sqfs_inode folder;
		sqfs_dir dir;
		sqfs_name namebuf;
		sqfs_dir_entry entry;
		sqfs_err err = SQFS_OK;

		if (get_inode(node->places[i], &folder) != 0 || sqfs_dir_open(fs, &folder, &dir, 0) != SQFS_OK)
			return EIO;
		sqfs_dentry_init(&entry, namebuf);
		while (sqfs_dir_next(fs, &dir, &entry, &err)) {
			struct listed *name;

			if (*count == room) {
				struct listed *more = realloc(*all, (room = room ? 2 * room : 64) * sizeof(**all));

				if (more == NULL)
					return ENOMEM;
				*all = more;
			}
			name = &(*all)[*count];
			if ((name->name = strdup(sqfs_dentry_name(&entry))) == NULL)
				return ENOMEM;
			name->candidate.place.layer = node->places[i].layer;
			name->candidate.place.id = sqfs_dentry_inode(&entry);
			name->candidate.type = sqfs_dentry_mode(&entry) & S_IFMT;
			name->candidate.number = sqfs_dentry_inode_num(&entry);
			name->rank = i;
			(*count)++;
		}
		if (err != SQFS_OK) {
			report_read_error(node->places[i].layer, "a directory");
			return EIO;
		}
	}
	return 0;
}

/* Make `node`'s listing: each name that its layers have, once, as the overlay shows it, in the
 * order of names (a squashfs folder's own). 0, or an errno (it is tried again at the next). */
static int make_listing(struct node *node)
{
	struct listed *all;
	struct candidate candidates[MAX_IMAGES];
	size_t count, first, next, listed = 0, k;
	int err = gather(node, &all, &count);

	if (err == 0 && count > 0) {
		qsort(all, count, sizeof(*all), by_name_then_rank);
		if ((node->listing = calloc(count, sizeof(*node->listing))) == NULL)
			err = ENOMEM;
	}
	for (first = 0; err == 0 && first < count; first = next) {
		struct entry *entry = &node->listing[listed];
		int found;

		for (next = first; next < count && strcmp(all[next].name, all[first].name) == 0; next++)
			candidates[next - first] = all[next].candidate;
		found = settle(candidates, (int)(next - first), entry);
		if (found == ENOENT)
			continue;
		err = found;
		if (err == 0) {
			entry->name = all[first].name;
			all[first].name = NULL;
			listed++;
		}
	}
	for (k = 0; k < count; k++)
		free(all[k].name);
	free(all);
	if (err != 0) {
		for (k = 0; k < listed; k++)
			free(node->listing[k].name);
		free(node->listing);
		node->listing = NULL;
		return err;
	}
	node->listed = listed;
	__atomic_store_n(&node->has_listing, 1, __ATOMIC_RELEASE);
	return 0;
}

#ifdef SQFS_MULTITHREADED
static pthread_mutex_t listing_lock = PTHREAD_MUTEX_INITIALIZER;
#endif

/* `node`'s listing, made at its first; 0, or an errno. */
static int listing_of(struct node *node)
{
	int err = 0;

#ifdef SQFS_MULTITHREADED
	pthread_mutex_lock(&listing_lock);
#endif
	if (!__atomic_load_n(&node->has_listing, __ATOMIC_ACQUIRE))
		err = make_listing(node);
#ifdef SQFS_MULTITHREADED
	pthread_mutex_unlock(&listing_lock);
#endif
	return err;
}

static int by_name(const void *name, const void *entry)
{
	return strcmp(name, ((const struct entry *)entry)->name);
}

/* What `name` stands for in folder `ino`: found in the folder's merged listing where it has one,
 * or where so many layers have the folder that asking each would cost more than listing them all
 * once (the listing is kept; a folder is looked up in far more often than it is listed); else
 * asked of each layer that has the folder. 0, ENOENT, or an errno. */
static int find_name(fuse_ino_t ino, const char *name, struct entry *found)
{
	struct place own;
	const struct place *stack;
	const struct entry *listed;
	int depth = stack_of(ino, &own, &stack), err;

	if (depth == 0)
		return ESTALE;
	if (is_node(ino)) {
		struct node *node = node_of(ino);

		if (depth >= LISTED_DEPTH || __atomic_load_n(&node->has_listing, __ATOMIC_ACQUIRE)) {
			if ((err = listing_of(node)) != 0)
				return err;
			listed = bsearch(name, node->listing, node->listed, sizeof(*listed), by_name);
			if (listed == NULL)
				return ENOENT;
			*found = *listed;
			return 0;
		}
	}
	return lookup_name(stack, depth, name, found);
}

/* Called for each entry of a folder with the offset after it; nonzero stops the listing. */
typedef int (*visitor)(void *context, const struct entry *entry, off_t next);

/* Visit the entries of folder `ino` from `offset` on (0: the first), in order; a deletion is no
 * entry. 0, or an errno. */
static int each_entry(fuse_ino_t ino, off_t offset, visitor visit, void *context)
{
	struct place own, place;
	const struct place *stack;
	sqfs *fs;
	sqfs_inode folder;
	sqfs_dir dir;
	sqfs_name namebuf;
	sqfs_dir_entry entry;
	sqfs_err err = SQFS_OK;
	struct entry visited;
	int depth = stack_of(ino, &own, &stack);

	if (depth == 0)
		return ESTALE;
	if (is_node(ino)) {
		struct node *node = node_of(ino);
		size_t k;
		int failed;

		if ((failed = listing_of(node)) != 0)
			return failed;
		for (k = (size_t)offset; k < node->listed; k++)
			if (visit(context, &node->listing[k], (off_t)k + 1))
				break;
		return 0;
	}
	/* A folder of one layer: its squashfs listing, offsets and all. */
	fs = &layers[own.layer].fs;
	if (get_inode(own, &folder) != 0)
		return EIO;
	if (!S_ISDIR(folder.base.mode))
		return ENOTDIR;
	if (sqfs_dir_open(fs, &folder, &dir, offset) != SQFS_OK)
		return EINVAL;
	sqfs_dentry_init(&entry, namebuf);
	place.layer = own.layer;
	while (sqfs_dir_next(fs, &dir, &entry, &err)) {
		place.id = sqfs_dentry_inode(&entry);
		visited.type = sqfs_dentry_mode(&entry) & S_IFMT;
		if (S_ISCHR(visited.type)) {
			sqfs_inode inode;

			if (get_inode(place, &inode) != 0)
				return EIO;
			if (is_deletion(&inode))
				continue;
		}
		visited.name = (char *)sqfs_dentry_name(&entry);
		visited.top = place;
		visited.ino = PLAIN_INO(place);
		visited.number = sqfs_dentry_inode_num(&entry);
		if (visit(context, &visited, sqfs_dentry_next_offset(&entry)))
			break;
	}
	if (err != SQFS_OK) {
		report_read_error(own.layer, "a directory");
		return EIO;
	}
	return 0;
}

/* The attributes of the inode at `place`, as `ino`. 0, or an errno. */
static int attributes(struct place place, fuse_ino_t ino, struct stat *st)
{
	sqfs_inode inode;

	if (get_inode(place, &inode) != 0)
		return EIO;
	if (sqfs_stat(&layers[place.layer].fs, &inode, st) != SQFS_OK) {
		report_read_error(place.layer, "an inode");
		return EIO;
	}
	st->st_ino = ino;
	own(st);
	return 0;
}

/* The root: each layer's root folder, the topmost first, down to an opaque one. 0, or -1. */
static int make_root(void)
{
	struct place roots[MAX_IMAGES];
	int depth = 0, i;

	for (i = layer_count - 1; i >= 0; i--) {
		roots[depth].layer = i;
		roots[depth].id = sqfs_inode_root(&layers[i].fs);
		if (is_opaque(roots[depth++]))
			break;
	}
	return node_ino(roots, depth) == FUSE_ROOT_ID ? 0 : -1;
}

/* --- FUSE's requests ------------------------------------------------------------------------ */

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
	(void)userdata;
	if (conn->capable & FUSE_CAP_CACHE_SYMLINKS)
		conn->want |= FUSE_CAP_CACHE_SYMLINKS;
	kernel_opens = (conn->capable & FUSE_CAP_NO_OPEN_SUPPORT) == 0;
	kernel_opens_dirs = (conn->capable & FUSE_CAP_NO_OPENDIR_SUPPORT) == 0;
}

/* The topmost place of `ino`; 0, or ESTALE for a number this daemon never gave. */
static int top_of(fuse_ino_t ino, struct place *top)
{
	const struct place *stack;

	if (stack_of(ino, top, &stack) == 0)
		return ESTALE;
	*top = stack[0];
	return 0;
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct place top;
	struct stat st;
	int err;

	(void)fi;
	if ((err = top_of(ino, &top)) != 0 || (err = attributes(top, ino, &st)) != 0)
		fuse_reply_err(req, err);
	else
		fuse_reply_attr(req, &st, FOREVER);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct entry found;
	struct fuse_entry_param param;
	int err = find_name(parent, name, &found);

	memset(&param, 0, sizeof(param));
	param.attr_timeout = param.entry_timeout = FOREVER;
	if (err == ENOENT) { /* a negative entry, cached as long as the others */
		fuse_reply_entry(req, &param);
		return;
	}
	if (err == 0)
		err = attributes(found.top, found.ino, &param.attr);
	if (err != 0) {
		fuse_reply_err(req, err);
		return;
	}
	param.ino = found.ino;
	fuse_reply_entry(req, &param);
}

/* A listing being answered: the buffer and what is left of it. */
struct answer {
	fuse_req_t req;
	char *pos;
	size_t size;
	int plus;
	int failed;
};

static int add_entry(void *context, const struct entry *entry, off_t next)
{
	struct answer *answer = context;
	size_t used;

	if (answer->plus) {
		struct fuse_entry_param param;

		/* Measure first: an entry handed to the kernel counts as looked up. */
		if (fuse_add_direntry_plus(answer->req, NULL, 0, entry->name, NULL, 0) > answer->size)
			return 1;
		memset(&param, 0, sizeof(param));
		if (attributes(entry->top, entry->ino, &param.attr) != 0) {
			answer->failed = 1;
			return 1;
		}
		param.ino = entry->ino;
		param.attr_timeout = param.entry_timeout = FOREVER;
		used = fuse_add_direntry_plus(answer->req, answer->pos, answer->size, entry->name, &param, next);
	} else {
		struct stat type;

		memset(&type, 0, sizeof(type));
		type.st_ino = entry->ino;
		type.st_mode = entry->type;
		used = fuse_add_direntry(answer->req, answer->pos, answer->size, entry->name, &type, next);
		if (used > answer->size)
			return 1;
	}
	answer->pos += used;
	answer->size -= used;
	return 0;
}

/* The entries of directory `ino` from `offset` on, as many as `size` bytes hold; with `plus`,
 * each with its attributes. */
static void list_directory(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, int plus)
{
	char *buf = malloc(size ? size : 1);
	struct answer answer = {req, buf, size, plus, 0};
	int err;

	if (buf == NULL) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	err = each_entry(ino, offset, add_entry, &answer);
	if ((err != 0 || answer.failed) && answer.pos == buf)
		fuse_reply_err(req, err != 0 ? err : EIO);
	else /* what was read; the next call starts after it and meets the error again */
		fuse_reply_buf(req, buf, answer.pos - buf);
	free(buf);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset,
		       struct fuse_file_info *fi)
{
	(void)fi;
	list_directory(req, ino, size, offset, 0);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset,
			   struct fuse_file_info *fi)
{
	(void)fi;
	list_directory(req, ino, size, offset, 1);
}

/* Without OPENDIR, the kernel keeps each listing in its page cache (FOPEN_CACHE_DIR, its default
 * then): a directory that many processes list (every rank's Python) is read from the image once. */
static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct place top;
	sqfs_inode inode;
	int err;

	if (!kernel_opens_dirs) {
		fuse_reply_err(req, ENOSYS);
		return;
	}
	if ((err = top_of(ino, &top)) != 0 || (err = get_inode(top, &inode)) != 0)
		fuse_reply_err(req, err);
	else if (!S_ISDIR(inode.base.mode))
		fuse_reply_err(req, ENOTDIR);
	else
		fuse_reply_open(req, fi);
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct place top;
	sqfs_inode inode;
	int err;

	if (!kernel_opens) {
		fuse_reply_err(req, ENOSYS); /* the kernel opens files itself from now on */
		return;
	}
	if (fi->flags & (O_WRONLY | O_RDWR))
		fuse_reply_err(req, EROFS);
	else if ((err = top_of(ino, &top)) != 0 || (err = get_inode(top, &inode)) != 0)
		fuse_reply_err(req, err);
	else if (!S_ISREG(inode.base.mode))
		fuse_reply_err(req, EISDIR);
	else {
		fi->keep_cache = 1;
		fuse_reply_open(req, fi);
	}
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	(void)fi;
	fuse_reply_err(req, 0);
}

/* Count `length` bytes read from `file` of `layer`; name it in the read log once they reach half
 * its size. A line the log could not take is written at the file's next read. */
static void note_read(int layer, const sqfs_inode *file, uint64_t length)
{
	struct layer *image = &layers[layer];
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
	size = snprintf(line, sizeof(line), "%d %u\n", layer, (unsigned int)number);
	if (write(read_log, line, (size_t)size) == size)
		__atomic_store_n(count, NAMED, __ATOMIC_RELAXED);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset, struct fuse_file_info *fi)
{
	struct place top;
	sqfs_inode file;
	off_t length = (off_t)size;
	char *buf;
	int err;

	(void)fi;
	if ((err = top_of(ino, &top)) != 0 || (err = get_inode(top, &file)) != 0) {
		fuse_reply_err(req, err);
		return;
	}
	buf = malloc(size ? size : 1);
	if (buf == NULL) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	if (sqfs_read_range(&layers[top.layer].fs, &file, offset, &length, buf) != SQFS_OK) {
		report_read_error(top.layer, "a file's data");
		fuse_reply_err(req, EIO);
	} else {
		fuse_reply_buf(req, buf, (size_t)length);
		note_read(top.layer, &file, (uint64_t)length);
	}
	free(buf);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct place top;
	sqfs_inode inode;
	size_t size;
	char *target;
	int err;

	if ((err = top_of(ino, &top)) != 0 || (err = get_inode(top, &inode)) != 0) {
		fuse_reply_err(req, err);
		return;
	}
	if (!S_ISLNK(inode.base.mode)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	if (sqfs_readlink(&layers[top.layer].fs, &inode, NULL, &size) != SQFS_OK
	    || (target = malloc(size + 1)) == NULL) {
		fuse_reply_err(req, EIO);
		return;
	}
	if (sqfs_readlink(&layers[top.layer].fs, &inode, target, &size) != SQFS_OK)
		fuse_reply_err(req, EIO);
	else
		fuse_reply_readlink(req, target);
	free(target);
}

/* The overlay's own attributes of a layer image (its opaque folders' marks), which the merged
 * tree has interpreted: never shown. */
static int is_overlay_attribute(const char *name)
{
	return strncmp(name, "user.overlay.", 13) == 0 || strncmp(name, "trusted.overlay.", 16) == 0;
}

/* The inode of `ino` where its layer holds extended attributes: 0; else ENOSYS (no image holds
 * any: the kernel stops asking) or the library's "no such attribute". */
static int xattr_inode(fuse_ino_t ino, struct place *top, sqfs_inode *inode)
{
	int err;

	if (!any_xattrs)
		return ENOSYS;
	if ((err = top_of(ino, top)) != 0)
		return err;
	if (!layers[top->layer].has_xattrs)
		return sqfs_enoattr();
	return get_inode(*top, inode);
}

/* Answer an xattr request for `size` bytes (0: how many it needs) with the `length` at `value`. */
static void reply_sized(fuse_req_t req, const char *value, size_t length, size_t size)
{
	if (size == 0)
		fuse_reply_xattr(req, length);
	else if (size < length)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, value, length);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct place top;
	sqfs_inode inode;
	size_t real = size;
	char *buf;
	int err = xattr_inode(ino, &top, &inode);

	if (err == 0 && is_overlay_attribute(name))
		err = sqfs_enoattr();
	if (err != 0) {
		fuse_reply_err(req, err);
		return;
	}
	if ((buf = malloc(size ? size : 1)) == NULL)
		fuse_reply_err(req, ENOMEM);
	else if (sqfs_xattr_lookup(&layers[top.layer].fs, &inode, name, buf, &real) != SQFS_OK)
		fuse_reply_err(req, EIO);
	else if (real == 0)
		fuse_reply_err(req, sqfs_enoattr());
	else
		reply_sized(req, buf, real, size);
	free(buf);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct place top;
	sqfs_inode inode;
	size_t all = 0, kept = 0, at, length;
	char *names = NULL;
	int err = xattr_inode(ino, &top, &inode);

	if (err == sqfs_enoattr()) { /* a layer without extended attributes: none */
		fuse_reply_xattr(req, 0);
		return;
	}
	if (err == 0 && (err = sqfs_listxattr(&layers[top.layer].fs, &inode, NULL, &all)) == 0
	    && all > 0 && (names = malloc(all)) == NULL)
		err = ENOMEM;
	if (err == 0 && names != NULL)
		err = sqfs_listxattr(&layers[top.layer].fs, &inode, names, &all);
	if (err != 0) {
		fuse_reply_err(req, err);
		free(names);
		return;
	}
	for (at = 0; at < all; at += length) { /* NUL-ended names, the overlay's left out */
		length = strlen(names + at) + 1;
		if (!is_overlay_attribute(names + at)) {
			memmove(names + kept, names + at, length);
			kept += length;
		}
	}
	reply_sized(req, names, kept, size);
	free(names);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	(void)ino;
	(void)nlookup;
	fuse_reply_none(req); /* nodes are kept for the daemon's life; other inodes need nothing */
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs total, one;
	int i, err;

	(void)ino;
	memset(&total, 0, sizeof(total));
	for (i = 0; i < layer_count; i++) {
		if ((err = sqfs_statfs(&layers[i].fs, &one)) != 0) {
			fuse_reply_err(req, err);
			return;
		}
		if (i == 0)
			total = one;
		else {
			total.f_blocks += one.f_blocks * one.f_frsize / total.f_frsize;
			total.f_files += one.f_files;
		}
	}
	fuse_reply_statfs(req, &total);
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

/* Open the images opts.argument[0 .. count - 1] as the layers, the lowest first, and make the
 * root; 0, or 1 after saying why not. */
static int open_layers(int count)
{
	int i;

	for (i = 0; i < count; i++) {
		struct layer *layer = &layers[i];

		if (sqfs_open_image(&layer->fs, opts.argument[i], 0) != SQFS_OK) /* it says why */
			return 1;
		layer_count = i + 1;
		if (enlarge_caches(&layer->fs) != 0) {
			fprintf(stderr, "hydria-squashfuse: out of memory for its caches\n");
			return 1;
		}
#ifdef OWN_ZSTD_CONTEXT
		if (layer->fs.sb.compression == ZSTD_COMPRESSION)
			layer->fs.decompressor = zstd_decompress;
#endif
		layer->has_xattrs = layer->fs.sb.xattr_id_table_start != (uint64_t)SQUASHFS_INVALID_BLK;
		any_xattrs |= layer->has_xattrs;
		layer->inodes = layer->fs.sb.inodes;
		if (read_log >= 0 && (layer->bytes_read = calloc((size_t)layer->inodes + 1, sizeof(uint64_t))) == NULL) {
			fprintf(stderr, "hydria-squashfuse: out of memory for its read log\n");
			return 1;
		}
	}
	if (make_root() != 0) {
		fprintf(stderr, "hydria-squashfuse: cannot read the images' root folders, or out of memory\n");
		return 1;
	}
	return 0;
}

static void close_layers(void)
{
	int i;

	for (i = 0; i < layer_count; i++) {
		sqfs_destroy(&layers[i].fs);
		free(layers[i].bytes_read);
	}
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

/* Answer one request if one is waiting; 1 when it did, 0 when none was there, -1 when the mount
 * has gone (or failed: `*status` says how). */
static int serve_one(struct fuse_buf *request, int *status)
{
	int received = fuse_session_receive_buf(session, request);

	if (received > 0) {
		fuse_session_process_buf(session, request);
		return 1;
	}
	if (received == -EAGAIN || received == -EINTR)
		return 0;
	if (received < 0)
		*status = received;
	return -1; /* 0: unmounted, the session has exited */
}

/* fuse_session_loop, except that after each request it keeps asking for the next for SPIN_NS
 * where a CPU is to spare, and stops as soon as another task wants its CPU. A daemon asleep costs
 * each request a wake-up of its CPU: tens of microseconds on a virtual machine's idle CPU, more
 * than serving a small file. Asleep, it waits in poll() for the next request or the end of the
 * mount. */
static int serve(void)
{
	struct fuse_buf request = {.mem = NULL};
	struct pollfd device = {.fd = fuse_session_fd(session), .events = POLLIN};
	int loadavg = -1, cpus = 1, status = 0, answered;
	long long spin_until = 0;
	long preempted = 0; /* set after each request */
	cpu_set_t allowed;

	/* Without either, it never spins: it sleeps after every request. */
	if (fcntl(device.fd, F_SETFL, fcntl(device.fd, F_GETFL) | O_NONBLOCK) == 0)
		loadavg = open("/proc/loadavg", O_RDONLY | O_CLOEXEC);
	if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0)
		cpus = CPU_COUNT(&allowed);
	for (;;) {
		if (spin_until == 0 && poll(&device, 1, -1) < 0) {
			if (errno == EINTR)
				continue;
			status = -errno;
			break;
		}
		answered = serve_one(&request, &status);
		if (answered < 0)
			break;
		if (answered > 0) {
			spin_until = loadavg >= 0 && cpu_to_spare(loadavg, cpus) ? now_ns() + SPIN_NS : 0;
			preempted = preemptions();
		} else if (spin_until != 0 && (preemptions() != preempted || now_ns() > spin_until)) {
			spin_until = 0;
		}
	}
	free(request.mem);
	if (loadavg >= 0)
		close(loadavg);
	fuse_session_reset(session);
	return status;
}
#else
/* The library's threads answer, until the mount has gone. */
static int serve(void)
{
	struct fuse_loop_config loop = {.clone_fd = 0, .max_idle_threads = 10};

	return fuse_session_loop_mt(session, &loop);
}
#endif

static int take_argument(void *data, const char *arg, int key, struct fuse_args *outargs)
{
	struct options *o = data;

	(void)outargs;
	if (key != FUSE_OPT_KEY_NONOPT)
		return 1; /* libfuse's own option: keep it */
	if (o->count == MAX_IMAGES + 1)
		return -1;
	o->argument[o->count++] = arg;
	return 0;
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

/* --- hydria-squashfuse --paths (see the top) --------------------------------------------------- */

/* Which files standard input lists ("IMAGE INODE" lines): a table by inode number for each
 * layer (1 for each), or -1 without memory. */
static int read_wanted(unsigned char **wanted)
{
	unsigned long layer, number;
	int i;

	for (i = 0; i < layer_count; i++)
		if ((wanted[i] = calloc((size_t)layers[i].inodes + 1, 1)) == NULL)
			return -1;
	while (scanf("%lu %lu", &layer, &number) == 2)
		if (layer < (unsigned long)layer_count && number >= 1 && number <= layers[layer].inodes)
			wanted[layer][number] = 1;
	return 0;
}

enum { PATH_BYTES = 65536 };

/* A walk below one folder: its path (`length` bytes of a buffer of PATH_BYTES), the lines
 * printed, or -1 once the image could not be read. */
struct walk {
	char *path;
	size_t length;
	unsigned char **wanted;
	long printed;
};

static int print_line(const struct entry *entry, const char *path, uint64_t size)
{
	sqfs_inode inode;

	if (get_inode(entry->top, &inode) != 0)
		return -1;
	printf("%d %o %llu %lu %s%c", entry->top.layer, (unsigned int)inode.base.mode, (unsigned long long)size,
	       (unsigned long)inode.base.mtime, path, '\0');
	return 0;
}

static long print_wanted(fuse_ino_t folder, char *path, size_t length, unsigned char **wanted);

/* Print `entry` when it is a wanted file, and the wanted files of a folder, then the folder. */
static int print_entry(void *context, const struct entry *entry, off_t next)
{
	struct walk *walk = context;
	size_t size = strlen(entry->name);
	int is_dir = S_ISDIR(entry->type);
	long below;

	(void)next;
	if (!is_dir && !(S_ISREG(entry->type) && walk->wanted[entry->top.layer][entry->number]))
		return 0;
	if (walk->length + size + 2 > PATH_BYTES)
		return 0; /* deeper than any path the kernel resolves */
	memcpy(walk->path + walk->length, entry->name, size + 1);
	if (is_dir) {
		walk->path[walk->length + size] = '/';
		below = print_wanted(entry->ino, walk->path, walk->length + size + 1, walk->wanted);
		walk->path[walk->length + size] = '\0';
		if (below <= 0) {
			walk->printed = below < 0 ? -1 : walk->printed;
			return below < 0;
		}
		walk->printed += below;
		if (print_line(entry, walk->path, 0) != 0) {
			walk->printed = -1;
			return 1;
		}
	} else {
		sqfs_inode inode;

		if (get_inode(entry->top, &inode) != 0 || print_line(entry, walk->path, inode.xtra.reg.file_size) != 0) {
			walk->printed = -1;
			return 1;
		}
	}
	walk->printed++;
	return 0;
}

/* Print the wanted files below `folder` (whose path is `path`, `length` bytes) and after them
 * each folder that holds one. The number of lines printed, or -1 when the image could not be read. */
static long print_wanted(fuse_ino_t folder, char *path, size_t length, unsigned char **wanted)
{
	struct walk walk = {path, length, wanted, 0};

	if (each_entry(folder, 0, print_entry, &walk) != 0)
		return -1;
	return walk.printed;
}

/* hydria-squashfuse --paths IMAGE... (see the top); the exit status. */
static int print_paths(int count)
{
	unsigned char *wanted[MAX_IMAGES] = {NULL};
	char *path = malloc(PATH_BYTES);
	int status = 1, i;
	long printed;

	if (path == NULL || open_layers(count) != 0)
		return 1;
	if (read_wanted(wanted) == 0 && (printed = print_wanted(FUSE_ROOT_ID, path, 0, wanted)) >= 0) {
		struct entry root = {.ino = FUSE_ROOT_ID, .type = S_IFDIR};

		path[0] = '\0';
		if (printed == 0 || (top_of(FUSE_ROOT_ID, &root.top) == 0 && print_line(&root, path, 0) == 0))
			status = 0;
	}
	if (status != 0)
		fprintf(stderr, "hydria-squashfuse: cannot read the images' folders: an image is damaged or cut short\n");
	if (fflush(stdout) != 0)
		status = 1;
	for (i = 0; i < layer_count; i++)
		free(wanted[i]);
	free(path);
	close_layers();
	return status;
}

/* --- hydria-squashfuse --folders (see the top) ------------------------------------------------- */

/* Print what the merged tree has at each part of `path` (see the top), changing it as it goes.
 * 0, or -1 once the images could not be read. */
static int print_parts(char *path)
{
	fuse_ino_t folder = FUSE_ROOT_ID;
	char *part, *rest = path;
	const char *separator = "";

	while ((part = strsep(&rest, "/")) != NULL) {
		struct entry found;
		struct stat st;
		int err;

		if (*part == '\0')
			continue;
		err = find_name(folder, part, &found);
		if (err == ENOENT || (err == 0 && !S_ISDIR(found.type))) {
			printf("%s%s", separator, err == ENOENT ? "-" : "x");
			break;
		}
		if (err != 0 || attributes(found.top, found.ino, &st) != 0)
			return -1;
		printf("%sd %o %u %u %lld", separator, (unsigned int)(st.st_mode & 07777), (unsigned int)st.st_uid,
		       (unsigned int)st.st_gid, (long long)st.st_mtime);
		separator = ";";
		folder = found.ino;
	}
	putchar('\n');
	return 0;
}

/* hydria-squashfuse --folders IMAGE... (see the top); the exit status. */
static int print_folders(int count)
{
	char *line = NULL;
	size_t room = 0;
	ssize_t length;
	int status = 0;

	opts.uid = opts.gid = IMAGE_OWNERS;
	if (open_layers(count) != 0)
		return 1;
	while (status == 0 && (length = getline(&line, &room, stdin)) > 0) {
		if (line[length - 1] == '\n')
			line[length - 1] = '\0';
		status = print_parts(line) == 0 ? 0 : 1;
	}
	if (status != 0)
		fprintf(stderr, "hydria-squashfuse: cannot read the images' folders: an image is damaged or cut short\n");
	if (fflush(stdout) != 0)
		status = 1;
	free(line);
	close_layers();
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

	if (argc >= 3 && argc - 2 <= MAX_IMAGES && (strcmp(argv[1], "--paths") == 0 || strcmp(argv[1], "--folders") == 0)) {
		for (i = 2; i < argc; i++)
			opts.argument[i - 2] = argv[i];
		return strcmp(argv[1], "--paths") == 0 ? print_paths(argc - 2) : print_folders(argc - 2);
	}
	read_log = read_log_descriptor();
	opts.uid = IMAGE_OWNERS;
	opts.gid = IMAGE_OWNERS;
	if (fuse_opt_parse(&args, &opts, spec, take_argument) == -1 || opts.count < 2) {
		fprintf(stderr, "usage: %s [-f] [-o uid=N,gid=N] IMAGE [IMAGE]... MOUNTPOINT (%d images at most, "
			"the lowest first)\n       %s --paths|--folders IMAGE [IMAGE]...\n", argv[0], MAX_IMAGES, argv[0]);
		return 2;
	}
	memset(&ops, 0, sizeof(ops));
	ops.init = op_init;
	ops.lookup = op_lookup;
	ops.getattr = op_getattr;
	ops.forget = op_forget;
	ops.opendir = op_opendir;
	ops.readdir = op_readdir;
	ops.readdirplus = op_readdirplus;
	ops.releasedir = op_release;
	ops.open = op_open;
	ops.read = op_read;
	ops.release = op_release;
	ops.readlink = op_readlink;
	ops.getxattr = op_getxattr;
	ops.listxattr = op_listxattr;
	ops.statfs = op_statfs;

	if (open_layers(opts.count - 1) == 0
	    && (session = fuse_session_new(&args, &ops, sizeof(ops), NULL)) != NULL) {
		if (fuse_session_mount(session, opts.argument[opts.count - 1]) == 0) {
			/* Until the kernel ends the connection: the last process of the container has gone. */
			status = serve() < 0 ? 1 : 0;
			fuse_session_unmount(session);
		}
		fuse_session_destroy(session);
	}
	close_layers();
	fuse_opt_free_args(&args);
	return status;
}
