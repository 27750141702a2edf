/*
 * bench/local-floor.c: the floor for `certgen --local DIR`, the least a program can do to
 * leave the same tree with the same guarantees. bench/local-floor builds it (cc -O2) and times
 * it in the same run as certgen.
 *
 *   floor fresh DIR SPEC...          write every Secret into DIR (which exists and is empty)
 *   floor fresh-syncfs DIR SPEC...   the same, each round of fsyncs replaced by one syncfs(2)
 *   floor noop DIR SPEC...           read every Secret back, as a run with nothing to do must
 *   floor run CMD ARGS...            the bench's timer: runs CMD (posix_spawn, output to
 *                                    /dev/null), prints its wall time in ms, exits as it did
 *
 * SPEC is one Secret: NAME:FILE=SIZE:FILE=SIZE..., the sizes of the files certgen wrote (the
 * script takes them from a real run). The first SPEC is the CA Secret. Files are filled with
 * 'x': key generation and certificate parsing are certgen's work, not the file system's.
 *
 * The tree: the lock file DIR/.certgen.lock (0600, held with flock while writing, as certgen
 * holds it), and per Secret: DIR/NAME/ (0700), a version directory DIR/NAME/..<16 hex> (0700)
 * holding every FILE (0600 for `*.key`, names with "secret" and dot files, else 0644), the link
 * DIR/NAME/..data -> ..<16 hex>, and for every FILE not starting with '.' the link
 * DIR/NAME/FILE -> ..data/FILE. Modes are set at creation (umask 0).
 *
 * Durability (fresh), what certgen promises for a power cut: (1) every file of a version, and
 * the names of the files and of the version's directory, are on disk before its ..data link is
 * made; (2) the CA Secret's links are on disk before any other Secret's ..data link is made.
 * Every file and directory changed since the last round is fsynced in the next round, and a
 * round comes before each batch of switches and at the end: three rounds, as few as (1) and
 * (2) allow, since the other Secrets are signed by the CA and written after it. The fsyncs of
 * a round run at once on up to SYNC_THREADS threads, so they share the device's cache flushes
 * (and a journal's commits) instead of waiting for one each.
 *
 * Trust (both modes), what certgen promises for a DIR others may have prepared: no link is
 * followed (O_NOFOLLOW on every open, names relative to an open directory), and everything
 * opened is checked by owner and mode (one fstat per descriptor; DIR's ancestors one stat each).
 * A no-op reads each ..data link, lists the version directory (a Secret may hold keys certgen
 * does not know), reads every file, and reads every visible link.
 *
 * Plain C on libc's system-call wrappers: no runtime, allocator or argument parser stands
 * between the process start and the first system call, so nothing here is overhead certgen
 * could be asked to match. Errors: a message and exit 1 (the bench only needs to see one).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_SECRETS 64
#define MAX_FILES 16
#define SYNC_THREADS 16
/* A version directory's name: ".." and 16 hex digits, as long as certgen's. */
#define VERSION "..0123456789abcdef"

struct file {
	const char *name;
	long size;
};

struct secret {
	char *name;
	struct file files[MAX_FILES];
	int nfiles;
	int dir; /* open Secret directory (fresh) */
};

static struct secret secrets[MAX_SECRETS];
static int nsecrets;
static char buf[1 << 16];

static void die(const char *what, const char *name)
{
	perror(name ? name : what);
	fprintf(stderr, "floor: %s failed\n", what);
	exit(1);
}

static void parse(int argc, char **argv)
{
	for (int i = 0; i < argc; i++) {
		struct secret *s = &secrets[nsecrets++];
		if (nsecrets > MAX_SECRETS)
			die("too many Secrets", NULL);
		s->name = strtok(argv[i], ":");
		for (char *f; (f = strtok(NULL, ":"));) {
			char *eq = strchr(f, '=');
			if (!eq || s->nfiles == MAX_FILES)
				die("SPEC NAME:FILE=SIZE...", argv[i]);
			*eq = 0;
			s->files[s->nfiles].name = f;
			s->files[s->nfiles++].size = atol(eq + 1);
		}
	}
}

static int secret_mode(const char *name)
{
	size_t n = strlen(name);
	int secret = name[0] == '.' || strstr(name, "secret") ||
		     (n > 4 && strcmp(name + n - 4, ".key") == 0);
	return secret ? 0600 : 0644;
}

/* The owner and mode rule, on an open descriptor. */
static void trusted(int fd, const char *name)
{
	struct stat st;
	if (fstat(fd, &st) || st.st_uid != geteuid() || (st.st_mode & 022))
		die("trusted", name);
}

static int open_dir(int at, const char *name)
{
	int fd = openat(at, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		die("open directory", name);
	trusted(fd, name);
	return fd;
}

static int open_root(const char *dir)
{
	char real[4096];
	struct stat st;
	int root = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (root < 0)
		die("open DIR", dir);
	trusted(root, dir);
	if (!realpath(dir, real))
		die("realpath", dir);
	for (char *slash; (slash = strrchr(real, '/'));) {
		*slash = 0;
		if (stat(*real ? real : "/", &st) || (st.st_uid != 0 && st.st_uid != geteuid()))
			die("ancestor", real);
		if (slash == real)
			break;
	}
	return root;
}

/* Descriptors changed since the last round of fsyncs, and the threads that sync them. */
static int pending[MAX_SECRETS * (MAX_FILES + 3) + 1];
static int npending;
static atomic_int next_pending;
static int use_syncfs;

static void dirty(int fd)
{
	for (int i = 0; i < npending; i++)
		if (pending[i] == fd)
			return;
	pending[npending++] = fd;
}

static void *sync_some(void *unused)
{
	(void)unused;
	for (int i; (i = atomic_fetch_add(&next_pending, 1)) < npending;)
		if (fsync(pending[i]))
			die("fsync", NULL);
	return NULL;
}

/* One round: every descriptor changed so far synced at once, by up to SYNC_THREADS threads
 * (concurrent fsyncs share the device's cache flushes and the journal's commits). */
static void round_of_fsyncs(void)
{
	pthread_t threads[SYNC_THREADS];
	int n = npending < SYNC_THREADS ? npending : SYNC_THREADS;
	if (use_syncfs) {
		if (syncfs(pending[0]))
			die("syncfs", NULL);
		npending = 0;
		return;
	}
	atomic_store(&next_pending, 0);
	for (int i = 1; i < n; i++)
		if (pthread_create(&threads[i], NULL, sync_some, NULL))
			die("pthread_create", NULL);
	sync_some(NULL);
	for (int i = 1; i < n; i++)
		pthread_join(threads[i], NULL);
	npending = 0;
}

/* A Secret's version: its directory and files, written, not yet synced. */
static void stage(int root, struct secret *s)
{
	if (mkdirat(root, s->name, 0700))
		die("mkdir", s->name);
	dirty(root);
	s->dir = open_dir(root, s->name);
	if (mkdirat(s->dir, VERSION, 0700))
		die("mkdir", VERSION);
	dirty(s->dir);
	int v = open_dir(s->dir, VERSION);
	dirty(v);
	for (int j = 0; j < s->nfiles; j++) {
		struct file *f = &s->files[j];
		int fd = openat(v, f->name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
				secret_mode(f->name));
		if (fd < 0 || write(fd, buf, f->size) != f->size)
			die("write", f->name);
		dirty(fd);
	}
}

/* The switch: ..data to the version, and every key a link through it. */
static void link_in(struct secret *s)
{
	if (symlinkat(VERSION, s->dir, "..data"))
		die("symlink", "..data");
	for (int j = 0; j < s->nfiles; j++) {
		char target[256];
		const char *name = s->files[j].name;
		if (name[0] == '.')
			continue;
		snprintf(target, sizeof target, "..data/%s", name);
		if (symlinkat(target, s->dir, name))
			die("symlink", name);
	}
	dirty(s->dir);
}

/* Three rounds, as few as the two promises allow: the CA's version durable before its switch;
 * the CA's switch and the other versions durable before their switches; those switches durable
 * before the program ends. (File and version descriptors stay open until exit.) */
static void fresh(int root)
{
	/* One writer at a time, as certgen: an exclusive lock on DIR/.certgen.lock. */
	int lock = openat(root, ".certgen.lock", O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (lock < 0 || flock(lock, LOCK_EX | LOCK_NB))
		die("lock", ".certgen.lock");
	stage(root, &secrets[0]);
	round_of_fsyncs();
	link_in(&secrets[0]);
	for (int i = 1; i < nsecrets; i++)
		stage(root, &secrets[i]);
	round_of_fsyncs();
	for (int i = 1; i < nsecrets; i++)
		link_in(&secrets[i]);
	round_of_fsyncs();
}

static void read_file(int at, const char *name)
{
	int fd = openat(at, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		die("open", name);
	trusted(fd, name);
	while (read(fd, buf, sizeof buf) > 0)
		;
	close(fd);
}

static void noop(int root)
{
	char version[256], link[256];
	for (int i = 0; i < nsecrets; i++) {
		struct secret *s = &secrets[i];
		int dir = open_dir(root, s->name);
		ssize_t n = readlinkat(dir, "..data", version, sizeof version - 1);
		if (n < 0)
			die("readlink", "..data");
		version[n] = 0;
		int v = open_dir(dir, version);
		DIR *list = fdopendir(dup(v));
		if (!list)
			die("list", version);
		for (struct dirent *e; (e = readdir(list));)
			if (e->d_name[0] != '.' || strcmp(e->d_name, ".certgen-annotations.json") == 0)
				read_file(v, e->d_name);
		closedir(list);
		close(v);
		for (int j = 0; j < s->nfiles; j++)
			if (s->files[j].name[0] != '.' &&
			    readlinkat(dir, s->files[j].name, link, sizeof link) < 0)
				die("readlink", s->files[j].name);
		close(dir);
	}
}

/* The timer: one process, from just before its spawn to just after it is reaped. A clock
 * around a shell's fork costs a millisecond or two more, the same for every contestant, which
 * would bring every ratio towards 1. */
static int run(char **argv)
{
	extern char **environ;
	struct timespec t0, t1;
	posix_spawn_file_actions_t actions;
	pid_t pid;
	int status;
	posix_spawn_file_actions_init(&actions);
	posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	if (posix_spawn(&pid, argv[0], &actions, NULL, argv, environ))
		die("spawn", argv[0]);
	if (waitpid(pid, &status, 0) != pid)
		die("wait", argv[0]);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("%.3f\n", (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

int main(int argc, char **argv)
{
	if (argc > 2 && strcmp(argv[1], "run") == 0)
		return run(argv + 2);
	const char *mode = argc > 1 ? argv[1] : "";
	int noop_run = strcmp(mode, "noop") == 0;
	use_syncfs = strcmp(mode, "fresh-syncfs") == 0;
	if (argc < 4 || !(noop_run || use_syncfs || strcmp(mode, "fresh") == 0)) {
		fprintf(stderr, "usage: floor fresh|fresh-syncfs|noop DIR NAME:FILE=SIZE...\n");
		return 2;
	}
	parse(argc - 3, argv + 3);
	umask(0);
	int root = open_root(argv[2]);
	if (!noop_run)
		fresh(root);
	else
		noop(root);
	return 0;
}
