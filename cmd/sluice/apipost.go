package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// postAccepted POSTs req as JSON to base+path on a running sluice ops
// server, with Authorization: Bearer $SLUICE_API_TOKEN when it is set, and
// decodes the 202 answer as Res. Another status is an error quoting the
// answer, prefixed with what.
func postAccepted[Res any](ctx context.Context, base, path, what string, req any) (Res, error) {
	var res Res
	body, err := json.Marshal(req)
	if err != nil {
		return res, fmt.Errorf("%s: encode request: %w", what, err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(base, "/")+path, bytes.NewReader(body))
	if err != nil {
		return res, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	if tok := apiToken(); tok != "" {
		hreq.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(hreq)
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusAccepted {
		return res, fmt.Errorf("%s: HTTP %d: %s", what, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	if err := json.Unmarshal(b, &res); err != nil {
		return res, fmt.Errorf("%s: response: %w", what, err)
	}
	return res, nil
}
