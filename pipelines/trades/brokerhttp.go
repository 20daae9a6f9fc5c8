package trades

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/sluicehq/sluice/stages"
)

// maxBrokerBody bounds the body of a broker's answer that is read.
const maxBrokerBody = 16 << 20

// brokerGet sends req and decodes a 2xx JSON answer into dst. Any other
// status is a *BrokerError (with the answer's Retry-After); the body of an
// error answer is neither read into the error nor logged (it may echo
// credentials). Network failures are returned wrapped.
func brokerGet(ctx context.Context, hc *http.Client, req *http.Request, dst any) (http.Header, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req.WithContext(ctx))
	if err != nil {
		// A *url.Error quotes the whole URL, query (signature) included:
		// only its cause is kept.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("%s %s: %w", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBrokerBody))
		return resp.Header, &BrokerError{Status: resp.StatusCode, RetryAfter: stages.ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxBrokerBody)).Decode(dst); err != nil {
		return resp.Header, fmt.Errorf("%s %s: decode answer: %w", req.Method, req.URL.Path, err)
	}
	return resp.Header, nil
}
