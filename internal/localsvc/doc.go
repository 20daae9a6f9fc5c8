// Package localsvc starts PostgreSQL, Redis and MinIO servers from binaries
// installed on this machine, for tests (through internal/testkit) and for
// `sluice demo`. It does not use package testing.
//
// # Binaries
//
// Each Start function looks its programs up on PATH first, then in a fixed
// place: initdb and postgres in /usr/lib/postgresql/*/bin (the highest
// version wins), minio in $(go env GOPATH)/bin. redis-server is only looked
// up on PATH, and symlinks to it are not resolved, because redis-server
// decides how to behave by the name it is run as. When a program is missing
// the error wraps ErrNotFound and nothing has been started or created.
//
// # Ports
//
// With Port 0 a server is started on a free 127.0.0.1 port; if it exits
// while starting (typically because another process took the port between
// the check and the bind) it is started again on another free port, up to
// three times. With a non-zero Port it is started once, on that port. A
// Start function returns only when the server answers a real request
// (a connection for PostgreSQL, PING for Redis, ListBuckets for MinIO), or
// with an error after 30 seconds, when its context ends, or as soon as the
// server exits. The context bounds the start only, never the server's
// lifetime. Servers listen on 127.0.0.1 only.
//
// # Directories
//
// Dir is the server's working directory. When Dir is empty the Start
// function creates a fresh directory under os.TempDir() and Stop removes it.
// A process that exits without Stop (os.Exit, a second Ctrl-C, SIGKILL)
// cannot remove it; on Linux the next Start of the same kind of server
// with an empty Dir, in any process, removes such directories in the same
// parent: each temporary directory holds a .localsvc.lock file that its
// process keeps locked (flock) until Stop, and the kernel releases the lock
// when the process dies, as it kills the process's servers (see Lifetime).
// When Dir is set it belongs to the caller: it is created if missing, kept by
// Stop, and holds what the server persists (a PostgreSQL cluster in
// Dir/data, MinIO objects in Dir/data), so a later Start on the same Dir
// reuses it. Only one server may use a Dir at a time.
//
// PostgreSQL refuses to run as root. When the process runs as root, initdb
// and postgres run as the "postgres" OS user instead; the directory must
// then be reachable by that user: a fresh directory is made under
// os.TempDir() (or /tmp when $TMPDIR is not searchable by other users), and
// a given Dir is chowned to "postgres" after checking that all its parent
// directories are searchable by others (StartPostgres fails otherwise; a
// directory under /tmp works).
//
// # Output
//
// Server output goes to the Log writer of the options when it is set; the
// last 64 KiB are always kept as well, returned by Output and included in
// start errors. Log is written by one goroutine at a time per server, and
// its write errors are ignored so that a failing writer never blocks a
// server.
//
// # Lifetime
//
// Stop ends the server gracefully (SIGINT, PostgreSQL's fast shutdown, for
// postgres; SIGTERM for the others), kills it if it has not exited after 10
// seconds, waits for it, and then removes the directory it created. Stop may
// be called any number of times and from several goroutines; every call
// returns the first call's result. On Linux each server is also sent SIGKILL
// when the process that started it dies, so a crashed parent leaves no
// server behind. (Linux sends that signal when the starting OS thread ends,
// and Go ends threads only under runtime.LockOSThread: do not start servers
// from a goroutine that locks its thread and then exits.)
//
// The package keeps no state between calls: two Start calls start two
// servers. The methods of the returned values are safe for concurrent use.
package localsvc
