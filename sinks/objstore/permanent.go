package objstore

import (
	"errors"

	"github.com/minio/minio-go/v7"
)

// permanentCode reports whether an S3 error code is one that no retry can
// fix: the credentials, the bucket or the key itself is wrong, and only a
// change of configuration (or of the key) helps.
func permanentCode(code string) bool {
	switch code {
	case "AccessDenied", "AllAccessDisabled", "AccountProblem",
		"InvalidAccessKeyId", "SignatureDoesNotMatch",
		"NoSuchBucket", "InvalidBucketName",
		"KeyTooLongError", "InvalidObjectName", "XMinioInvalidObjectName":
		return true
	}
	return false
}

// IsPermanent reports whether err, from any Store method, is one that
// retrying the same call cannot fix:
//
//   - a key refused by ValidKey (errors.Is ErrInvalidKey);
//   - an S3 error response with a code such as AccessDenied,
//     InvalidAccessKeyId, SignatureDoesNotMatch, NoSuchBucket,
//     InvalidBucketName, KeyTooLongError or InvalidObjectName.
//
// It reports false for nil, for a missing key (ErrNotFound, S3 NoSuchKey:
// callers handle that case themselves), for server-side and throttling
// errors (5xx, SlowDown), network errors and context cancellation — those
// may succeed later. Wrapping with %w is seen through.
func IsPermanent(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, ErrInvalidKey) {
		return true
	}
	code, _ := S3Code(err)
	return permanentCode(code)
}

// S3Code returns the code and bucket name of the S3 error response carried
// by err (seeing through %w wrapping), or empty strings when err carries
// none. The bucket is empty when the server did not name it.
func S3Code(err error) (code, bucket string) {
	var v minio.ErrorResponse
	if errors.As(err, &v) {
		return v.Code, v.BucketName
	}
	var p *minio.ErrorResponse
	if errors.As(err, &p) && p != nil {
		return p.Code, p.BucketName
	}
	return "", ""
}
