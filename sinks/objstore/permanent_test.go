package objstore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/sinks/objstore"
)

func TestIsPermanent(t *testing.T) {
	t.Parallel()
	resp := func(status int, code string) error {
		return minio.ErrorResponse{StatusCode: status, Code: code, BucketName: "bkt"}
	}
	wrap := func(err error) error { return fmt.Errorf("objstore: put k: %w", err) }
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"invalid-key", objstore.ValidKey(""), true},
		{"invalid-key-wrapped", wrap(objstore.ErrInvalidKey), true},
		{"access-denied", wrap(resp(403, "AccessDenied")), true},
		{"access-denied-pointer", wrap(&minio.ErrorResponse{Code: "AccessDenied"}), true},
		{"no-such-bucket", wrap(resp(404, "NoSuchBucket")), true},
		{"invalid-bucket-name", wrap(resp(400, "InvalidBucketName")), true},
		{"invalid-access-key", wrap(resp(403, "InvalidAccessKeyId")), true},
		{"signature", wrap(resp(403, "SignatureDoesNotMatch")), true},
		{"key-too-long", wrap(resp(400, "KeyTooLongError")), true},
		{"invalid-object-name", wrap(resp(400, "InvalidObjectName")), true},
		{"not-found", wrap(objstore.ErrNotFound), false},
		{"no-such-key", wrap(resp(404, "NoSuchKey")), false},
		{"slow-down", wrap(resp(503, "SlowDown")), false},
		{"internal", wrap(resp(500, "InternalError")), false},
		{"unavailable", wrap(resp(503, "ServiceUnavailable")), false},
		{"canceled", wrap(context.Canceled), false},
		{"deadline", wrap(context.DeadlineExceeded), false},
		{"network", wrap(&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}), false},
		{"other", errors.New("boom"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := objstore.IsPermanent(tc.err); got != tc.want {
				t.Errorf("IsPermanent(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

// The errors the S3 store returns for real server answers classify as
// their codes say, and S3Code names the code and bucket.
func TestIsPermanentFromServer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, code string
		status     int
		want       bool
	}{
		{"access-denied", "AccessDenied", http.StatusForbidden, true},
		{"no-such-bucket", "NoSuchBucket", http.StatusNotFound, true},
		{"no-such-key", "NoSuchKey", http.StatusNotFound, false},
		{"slow-down", "SlowDown", http.StatusServiceUnavailable, false},
		{"key-too-long", "KeyTooLongError", http.StatusBadRequest, true},
		{"invalid-object-name", "InvalidObjectName", http.StatusBadRequest, true},
		{"minio-invalid-object-name", "XMinioInvalidObjectName", http.StatusBadRequest, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, _ := fakeS3(t, s3Error(tc.status, tc.code, "refused: "+tc.code))
			ctx := testkit.Context(t)
			ops := map[string]error{
				"put": s.Put(ctx, "k", []byte("v"), ""),
				"get": func() error { _, err := s.Get(ctx, "k"); return err }(),
			}
			if tc.code != "NoSuchKey" { // deleting a missing key is no error
				ops["delete"] = s.Delete(ctx, "k")
			}
			for op, err := range ops {
				if err == nil {
					t.Fatalf("%s: no error", op)
				}
				if got := objstore.IsPermanent(err); got != tc.want {
					t.Errorf("%s: IsPermanent(%v) = %v, want %v", op, err, got, tc.want)
				}
				// A key the server refuses is a problem of that key
				// (ErrInvalidKey: callers dead-letter it), not of the
				// store's configuration.
				if refused := tc.code == "KeyTooLongError" || strings.HasSuffix(tc.code, "InvalidObjectName"); errors.Is(err, objstore.ErrInvalidKey) != refused {
					t.Errorf("%s: errors.Is(%v, ErrInvalidKey) = %v, want %v", op, err, !refused, refused)
				}
				if tc.code == "NoSuchKey" {
					continue // mapped to ErrNotFound
				}
				if code, _ := objstore.S3Code(err); code != tc.code {
					t.Errorf("%s: S3Code(%v) = %q, want %q", op, err, code, tc.code)
				}
			}
		})
	}
	if code, bucket := objstore.S3Code(fmt.Errorf("x: %w", minio.ErrorResponse{Code: "NoSuchBucket", BucketName: "b1"})); code != "NoSuchBucket" || bucket != "b1" {
		t.Errorf("S3Code = %q, %q", code, bucket)
	}
	if code, bucket := objstore.S3Code(errors.New("plain")); code != "" || bucket != "" {
		t.Errorf("S3Code(plain) = %q, %q", code, bucket)
	}
}
