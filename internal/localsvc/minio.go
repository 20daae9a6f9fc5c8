package localsvc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// MinioOptions configures StartMinio. The zero value is valid.
type MinioOptions struct {
	// Dir is the server's directory; objects are stored in Dir/data.
	// Empty: a fresh temporary directory, removed by Stop. Set: the
	// caller's, created if missing and kept by Stop, so a later StartMinio
	// on it (with the same keys) sees the same buckets and objects.
	Dir string
	// Port is the TCP port of the S3 API on 127.0.0.1; 0 picks a free one.
	Port int
	// Log receives the server's output (nil: only kept for Output and
	// errors).
	Log io.Writer
	// AccessKey is the root user, at least 3 characters; empty: "localsvc".
	AccessKey string
	// SecretKey is the root password, at least 8 characters; empty: a
	// random one (see Minio.SecretKey).
	SecretKey string
}

// Minio is a running local MinIO server with no buckets of its own. Its
// methods are safe for concurrent use.
type Minio struct {
	// Endpoint is 127.0.0.1:PORT, plain HTTP.
	Endpoint string
	// AccessKey and SecretKey are the root credentials. Do not log
	// SecretKey.
	AccessKey, SecretKey string
	// Port is the TCP port of the S3 API on 127.0.0.1.
	Port int

	srv *server
}

// StartMinio starts a single-drive MinIO server (minio from PATH or
// $(go env GOPATH)/bin, console and update checks off) on 127.0.0.1 and
// returns when it serves S3 requests (ListBuckets succeeds). ctx bounds the
// wait, not the server. The error wraps ErrNotFound when there is no minio
// binary; on any error nothing is left running and a temporary Dir is
// removed.
func StartMinio(ctx context.Context, o MinioOptions) (*Minio, error) {
	access := cmp.Or(o.AccessKey, "localsvc")
	secret := cmp.Or(o.SecretKey, fmt.Sprintf("localsvc-%016x", rand.Uint64()))
	if len(access) < 3 || len(secret) < 8 {
		return nil, errors.New("start minio: AccessKey needs at least 3 characters and SecretKey at least 8")
	}
	var dirs []string
	for _, p := range filepath.SplitList(goPath()) {
		dirs = append(dirs, filepath.Join(p, "bin"))
	}
	bin, err := findBinary("minio", dirs...)
	if err != nil {
		return nil, err
	}
	srv, port, err := launch{
		name:    "minio",
		pattern: "localsvc-minio-",
		proc: func(dir string, port int) procSpec {
			return procSpec{
				path: bin,
				args: []string{"server", filepath.Join(dir, "data"), "--address", localAddr(port), "--quiet"},
				env: []string{
					"MINIO_ROOT_USER=" + access,
					"MINIO_ROOT_PASSWORD=" + secret,
					"MINIO_BROWSER=off",
					"MINIO_UPDATE=off",
					"HOME=" + dir,
				},
			}
		},
		// MinIO answers its health endpoint before it can serve requests.
		ready: func(ctx context.Context, port int) error {
			c, err := minio.New(localAddr(port), &minio.Options{Creds: credentials.NewStaticV4(access, secret, "")})
			if err != nil {
				return err
			}
			_, err = c.ListBuckets(ctx)
			return err
		},
	}.start(ctx, common{dir: o.Dir, port: o.Port, log: o.Log})
	if err != nil {
		return nil, err
	}
	return &Minio{Endpoint: localAddr(port), AccessKey: access, SecretKey: secret, Port: port, srv: srv}, nil
}

// Output returns the last 64 KiB of the server's output.
func (m *Minio) Output() string { return m.srv.output() }

// Stop stops the server (SIGTERM, SIGKILL after 10s) and removes its
// directory if StartMinio created it. It returns the first call's result on
// every call, and reports a server that had exited on its own before Stop.
func (m *Minio) Stop() error { return m.srv.stop() }
