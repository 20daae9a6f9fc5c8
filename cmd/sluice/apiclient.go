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

	"github.com/twmb/franz-go/pkg/kgo"
)

// postAPI posts req as JSON to path of the ops server at base (with
// Authorization: Bearer $SLUICE_API_TOKEN when it is set) and decodes a
// 202 answer into res. Another status is an error "what: HTTP code: body".
func postAPI(ctx context.Context, what, base, path string, req, res any) error {
	body, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(base, "/")+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	hreq.Header.Set("Content-Type", "application/json")
	if tok := apiToken(); tok != "" {
		hreq.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(hreq)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("%s: HTTP %d: %s", what, resp.StatusCode, strings.TrimSpace(string(b)))
	}
	if err := json.Unmarshal(b, res); err != nil {
		return fmt.Errorf("%s: response: %w", what, err)
	}
	return nil
}

// withKafkaClient connects to Kafka with g's settings and calls fn with a
// client (closed when fn returns), the connection options and a context
// bounded to 30 s.
func withKafkaClient[T any](ctx context.Context, g *globalConfig, fn func(ctx context.Context, cl *kgo.Client, kopts []kgo.Opt) (T, error)) (T, error) {
	var zero T
	kopts, err := kafkaOpts(ctx, g)
	if err != nil {
		return zero, err
	}
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return zero, err
	}
	defer cl.Close()
	tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return fn(tctx, cl, kopts)
}
