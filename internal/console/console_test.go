package console

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/internal/groupctl"
	"github.com/sluicehq/sluice/internal/testkit"
	"github.com/sluicehq/sluice/pipelines"
	"github.com/sluicehq/sluice/pipelines/smap"
	"github.com/sluicehq/sluice/pipelines/ticks"
	"github.com/sluicehq/sluice/stages"
)

// scriptValue is a record value that must reach the page as text.
const scriptValue = `<script>document.title="pwned"</script>`

// fixture is a Kafka cluster (the real one when KAFKA_BROKERS is set, else
// kfake) holding one declared pipeline: a group with lag on its input, a
// DLQ with four dead letters, a control flag and a ticks job state.
type fixture struct {
	k                                 *testkit.Kafka
	cl                                *kgo.Client
	adm                               *kadm.Client
	src, dlqTopic, flags, jobs, group string
	spec                              pipelines.Spec
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	k := testkit.NewKafka(t, testkit.FakeOK())
	f := &fixture{k: k, cl: k.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner())), adm: k.Admin(t),
		src: k.Topic(t, "src", 2), dlqTopic: k.Topic(t, "dlq", 2), flags: k.Topic(t, "flags", 1), jobs: k.Topic(t, "jobs", 1),
		group: testkit.Name(t, "grp")}
	f.spec = pipelines.Spec{Name: "testpipe", Consumers: []pipelines.Consumer{{Group: f.group, Input: f.src, DLQ: f.dlqTopic}}}
	ctx := testkit.Context(t)
	// Five records on partition 0 of the input; the group committed 2: lag 3.
	for i := range 5 {
		f.produce(t, &kgo.Record{Topic: f.src, Partition: 0, Key: []byte(fmt.Sprint("k", i)), Value: []byte("{}")})
	}
	var offs kadm.Offsets
	offs.AddOffset(f.src, 0, 2, -1)
	if err := f.adm.CommitAllOffsets(ctx, f.group, offs); err != nil {
		t.Fatalf("commit: %v", err)
	}
	failed := time.Now().UTC().Add(-time.Minute).Format(time.RFC3339)
	dead := func(p int32, key, value, reason, rule string, srcOff int) *kgo.Record {
		h := []kgo.RecordHeader{{Key: stages.HeaderReason, Value: []byte(reason)}, {Key: stages.HeaderSourceTopic, Value: []byte(f.src)},
			{Key: stages.HeaderSourcePartition, Value: []byte("1")}, {Key: stages.HeaderSourceOffset, Value: []byte(strconv.Itoa(srcOff))},
			{Key: stages.HeaderFailedAt, Value: []byte(failed)}, {Key: stages.HeaderError, Value: []byte("bad <b>bold</b> value")}}
		if rule != "" {
			h = append(h, kgo.RecordHeader{Key: stages.HeaderRule, Value: []byte(rule)})
		}
		return &kgo.Record{Topic: f.dlqTopic, Partition: p, Key: []byte(key), Value: []byte(value), Headers: h}
	}
	f.produce(t, dead(0, "FPT", `{"price":-1}`, "sanity_fail", "ta.price", 0))
	f.produce(t, dead(0, "VNM", `{"price":-2}`, "sanity_fail", "ta.price", 1))
	f.produce(t, dead(1, "XSS", scriptValue, "decode_error", "", 2))
	f.produce(t, dead(1, "HPG", `{"volume":-1}`, "sanity_fail", "ta.volume", 3))
	f.produce(t, &kgo.Record{Topic: f.flags, Key: []byte("SCRAPE_SLOW"), Value: []byte(`{"value":true,"lag":12345,"updated_at":"2026-11-26T07:00:00Z"}`)})
	st := ticks.JobState{JobKey: "AAPL:2024-05-02", Symbol: "AAPL", Date: "2024-05-02", Status: ticks.StatusRunning, StartTime: 1000, EndTime: 2000, Cursor: 1499, Segments: 7, Ticks: 4242}
	b, _ := json.Marshal(st)
	f.produce(t, &kgo.Record{Topic: f.jobs, Key: []byte(st.JobKey), Value: b})
	return f
}

func (f *fixture) produce(t *testing.T, r *kgo.Record) {
	t.Helper()
	if err := f.cl.ProduceSync(testkit.Context(t), r).FirstErr(); err != nil {
		t.Fatalf("produce to %s: %v", r.Topic, err)
	}
}

// serve starts a console over the fixture with token ("" = read-only).
func (f *fixture) serve(t *testing.T, token string) (*Console, *httptest.Server) {
	t.Helper()
	c, err := New(Config{Kafka: f.k.Opts(t), Pipelines: []pipelines.Spec{f.spec}, Token: token, FlagsTopic: f.flags, JobsTopic: f.jobs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	srv := httptest.NewServer(c.Handler())
	t.Cleanup(srv.Close)
	return c, srv
}

func get(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func post(t *testing.T, u string, form url.Values) (int, string) {
	t.Helper()
	resp, err := http.PostForm(u, form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// csrfOf reads the CSRF token the dead-letter page embeds in its form.
func csrfOf(t *testing.T, srv *httptest.Server, topic string) string {
	t.Helper()
	_, body := get(t, srv.URL+"/dlq?topic="+url.QueryEscape(topic))
	m := csrfRe.FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no CSRF field on the dead-letter page:\n%.2000s", body)
	}
	return m[1]
}

// ends is the end offset of every partition of topic.
func ends(t *testing.T, adm *kadm.Client, topic string) map[int32]int64 {
	t.Helper()
	return testkit.EndOffsets(t, adm, topic)
}

// unchanged fails the test when the input topic's end offsets moved since
// before: what (a refused write, a preview) sent records.
func (f *fixture) unchanged(t *testing.T, before map[int32]int64, what string) {
	t.Helper()
	if after := ends(t, f.adm, f.src); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("%s changed %s: %v → %v", what, f.src, before, after)
	}
}

func TestOverviewShowsGroupLagAndFlags(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	c, srv := f.serve(t, "")
	rep, err := groupctl.Lag(testkit.Context(t), f.adm, f.group)
	if err != nil {
		t.Fatal(err)
	}
	gl, ok := rep.Group(f.group)
	if !ok || gl.Total != 3 {
		t.Fatalf("broker says lag %+v, the fixture wants 3", gl)
	}
	status, body := get(t, srv.URL+"/")
	if status != http.StatusOK {
		t.Fatalf("GET / = %d\n%s", status, body)
	}
	for _, want := range []string{
		`id="group-` + f.group + `"`,
		`total lag <b class="total-lag">3</b>`,
		`<tr data-topic="` + f.src + `" data-partition="0"><td>` + f.src + `</td><td>0</td><td></td><td>2</td><td>5</td><td class="lagv">3</td></tr>`,
		`<tr class="flag" data-flag="SCRAPE_SLOW"><td>SCRAPE_SLOW</td><td class="on">true</td><td>12345</td>`,
		`href="/dlq?topic=` + f.dlqTopic + `"`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("overview lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("page:\n%s", body)
	}
	// The chart's data comes from the console's samples.
	if st, _ := get(t, srv.URL+"/api/lag?group="+f.group); st != http.StatusNotFound {
		t.Fatalf("lag JSON before any sample = %d, want 404", st)
	}
	ctx, cancel := context.WithCancel(testkit.Context(t))
	done := make(chan struct{})
	go func() { c.Sample(ctx); close(done) }()
	var ch chart
	for deadline := time.Now().Add(30 * time.Second); ; {
		st, b := get(t, srv.URL+"/api/lag?group="+f.group)
		if st == http.StatusOK {
			if err := json.Unmarshal([]byte(b), &ch); err != nil {
				t.Fatal(err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no lag sample after 30 s: %d %s", st, b)
		}
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	<-done
	i := -1
	for n, l := range ch.Labels {
		if l == f.src+"[0]" {
			i = n
		}
	}
	if i < 0 || len(ch.Times) == 0 || ch.Data[i][0] == nil || *ch.Data[i][0] != 3 {
		t.Fatalf("chart %+v: want %s[0] at lag 3", ch, f.src)
	}
}

func TestDeadLettersCountsListAndEscaping(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	_, srv := f.serve(t, "")
	status, body := get(t, srv.URL+"/dlq?topic="+url.QueryEscape(f.dlqTopic))
	if status != http.StatusOK {
		t.Fatalf("GET /dlq = %d\n%s", status, body)
	}
	for _, want := range []string{
		`<tr class="count" data-reason="sanity_fail" data-rule="ta.price"><td>sanity_fail</td><td>ta.price</td><td class="n">2</td></tr>`,
		`<tr class="count" data-reason="sanity_fail" data-rule="ta.volume"><td>sanity_fail</td><td>ta.volume</td><td class="n">1</td></tr>`,
		`<tr class="count" data-reason="decode_error" data-rule=""><td>decode_error</td><td>(none)</td><td class="n">1</td></tr>`,
		`<span id="matching">4</span>`,
		// The value and a header are text, never markup.
		`<pre class="value">&lt;script&gt;document.title=&#34;pwned&#34;&lt;/script&gt;</pre>`,
		`<th>dlq.error</th><td>bad &lt;b&gt;bold&lt;/b&gt; value</td>`,
		"Redrive is disabled: this console is read-only.",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("dead-letter page lacks %s", want)
		}
	}
	if strings.Contains(body, "<script>document") || strings.Contains(body, "<b>bold") {
		t.Error("record content reached the page as markup")
	}
	if strings.Contains(body, `name="sel"`) {
		t.Error("a read-only console offers a selection to redrive")
	}
	// The filters of dlq inspect.
	_, body = get(t, srv.URL+"/dlq?"+url.Values{"topic": {f.dlqTopic}, "rule": {"ta.price"}, "since": {"-1h"}}.Encode())
	if !strings.Contains(body, `<span id="matching">2</span>`) || !strings.Contains(body, `key <code class="key">FPT</code>`) || strings.Contains(body, `key <code class="key">HPG</code>`) {
		t.Errorf("rule filter: want FPT and VNM only\n%s", body)
	}
	_, body = get(t, srv.URL+"/dlq?"+url.Values{"topic": {f.dlqTopic}, "rule": {"(none)"}}.Encode())
	if !strings.Contains(body, `<span id="matching">1</span>`) || !strings.Contains(body, `key <code class="key">XSS</code>`) {
		t.Errorf("rule (none): want XSS only\n%s", body)
	}
}

func TestJobsPage(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	_, srv := f.serve(t, "")
	status, body := get(t, srv.URL+"/jobs")
	if status != http.StatusOK {
		t.Fatalf("GET /jobs = %d\n%s", status, body)
	}
	for _, want := range []string{
		`<tr class="job" data-job="AAPL:2024-05-02"><td>AAPL:2024-05-02</td><td class="status">RUNNING</td>`,
		`<td class="segments">7</td><td class="ticks">4242</td>`,
		"No Redis configured",
		`id="trades"`,
		"No PostgreSQL configured (DATABASE_URL)",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("jobs page lacks %s\n%s", want, body)
		}
	}
}

// Writes need a token-configured console, the CSRF token and the operator
// token; each refusal is a 403 page and sends nothing.
func TestRedriveRefusals(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	_, ro := f.serve(t, "")
	_, rw := f.serve(t, "op-token")
	csrf := csrfOf(t, rw, f.dlqTopic)
	before := ends(t, f.adm, f.src)
	form := func(kv ...string) url.Values {
		v := url.Values{"topic": {f.dlqTopic}, "sel": {"0:0"}}
		for i := 0; i < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return v
	}
	cases := []struct {
		name string
		srv  *httptest.Server
		form url.Values
		want string
	}{
		{"read-only console", ro, form("action", "confirm", "csrf", csrfOf(t, ro, f.dlqTopic), "token", "op-token"), "read-only"},
		{"read-only console, preview", ro, form("action", "preview", "csrf", csrfOf(t, ro, f.dlqTopic)), "read-only"},
		{"no CSRF", rw, form("action", "confirm", "token", "op-token"), "CSRF"},
		{"bad CSRF", rw, form("action", "confirm", "csrf", strings.Repeat("0", 64), "token", "op-token"), "CSRF"},
		{"bad CSRF, preview", rw, form("action", "preview", "csrf", "x"), "CSRF"},
		{"no token", rw, form("action", "confirm", "csrf", csrf), "operator token"},
		{"wrong token", rw, form("action", "confirm", "csrf", csrf, "token", "op-tokeN"), "operator token"},
	}
	for _, tc := range cases {
		status, body := post(t, tc.srv.URL+"/dlq/redrive", tc.form)
		if status != http.StatusForbidden || !strings.Contains(body, tc.want) || !strings.Contains(body, "Nothing was changed") {
			t.Errorf("%s: %d, want 403 naming %q\n%.1500s", tc.name, status, tc.want, body)
		}
	}
	f.unchanged(t, before, "refused writes")
}

// Bad input gives a clear 4xx page and changes nothing.
func TestBadInput(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	_, srv := f.serve(t, "op-token")
	csrf := csrfOf(t, srv, f.dlqTopic)
	before := ends(t, f.adm, f.src)
	for _, tc := range []struct {
		path   string
		status int
		want   string
	}{
		{"/dlq?topic=nope", 404, "is not a dead-letter topic"},
		{"/dlq?topic=" + f.dlqTopic + "&since=yesterday", 400, "bad filter: invalid since"},
		{"/dlq?topic=" + f.dlqTopic + "&since=-1h&until=-2h", 400, "is not after since"},
		{"/dlq?topic=" + f.dlqTopic + "&limit=0", 400, "bad limit"},
		{"/api/lag?group=nope", 404, "no samples of group nope"},
		{"/nope", 404, ""},
	} {
		status, body := get(t, srv.URL+tc.path)
		if status != tc.status || !strings.Contains(body, tc.want) {
			t.Errorf("GET %s = %d, want %d with %q\n%.800s", tc.path, status, tc.status, tc.want, body)
		}
	}
	base := url.Values{"topic": {f.dlqTopic}, "csrf": {csrf}, "token": {"op-token"}, "action": {"confirm"}}
	with := func(kv ...string) url.Values {
		v := url.Values{}
		for k, vs := range base {
			v[k] = vs
		}
		for i := 0; i < len(kv); i += 2 {
			v[kv[i]] = []string{kv[i+1]}
		}
		return v
	}
	for _, tc := range []struct {
		name   string
		form   url.Values
		status int
		want   string
	}{
		{"unknown topic", with("topic", "nope", "sel", "0:0"), 404, "is not a dead-letter topic"},
		{"malformed selection", with("sel", "0-0"), 400, "bad selection"},
		{"malformed filter", with("sel", "0:0", "since", "soon"), 400, "bad filter"},
		{"nothing selected", with(), 400, "nothing selected"},
		{"all without a filter", with("all", "1"), 400, "no filter"},
		{"bad action", with("action", "delete", "sel", "0:0"), 400, "bad action"},
	} {
		status, body := post(t, srv.URL+"/dlq/redrive", tc.form)
		if status != tc.status || !strings.Contains(body, tc.want) {
			t.Errorf("%s: %d, want %d with %q\n%.800s", tc.name, status, tc.status, tc.want, body)
		}
	}
	f.unchanged(t, before, "bad input")
}

// A preview sends nothing and lists the decisions; the confirmation sends
// exactly the selected records back to their source topic.
func TestRedrivePreviewThenConfirm(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	_, srv := f.serve(t, "op-token")
	csrf := csrfOf(t, srv, f.dlqTopic)
	before := ends(t, f.adm, f.src)
	sel := url.Values{"topic": {f.dlqTopic}, "csrf": {csrf}, "sel": {"1:0", "0:1"}} // XSS and VNM
	sel.Set("action", "preview")
	status, body := post(t, srv.URL+"/dlq/redrive", sel)
	if status != http.StatusOK || !strings.Contains(body, `would send <b id="would-send">2</b>`) || strings.Count(body, `class="decision" data-decision="send"`) != 2 {
		t.Fatalf("preview: %d\n%s", status, body)
	}
	if strings.Contains(body, "<script>document") {
		t.Fatal("the preview rendered a key or value as markup")
	}
	f.unchanged(t, before, "the preview")
	sel.Set("action", "confirm")
	sel.Set("token", "op-token")
	status, body = post(t, srv.URL+"/dlq/redrive", sel)
	if status != http.StatusOK || !strings.Contains(body, `Sent <b id="sent">2</b>`) {
		t.Fatalf("confirm: %d\n%s", status, body)
	}
	got := map[string]string{}
	for _, r := range f.k.ReadTopic(t, f.src) {
		if r.Partition == 1 {
			got[string(r.Key)] = string(r.Value)
		}
	}
	if len(got) != 2 || got["XSS"] != scriptValue || got["VNM"] != `{"price":-2}` {
		t.Fatalf("source partition 1 holds %v, want XSS and VNM re-driven", got)
	}
}

func TestCheckAddr(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr, token string
		ok          bool
	}{
		{"127.0.0.1:8080", "", true},
		{"127.0.0.2:0", "", true},
		{"[::1]:8080", "", true},
		{"localhost:8080", "", true},
		{"0.0.0.0:8080", "", false},
		{":8080", "", false},
		{"192.168.1.5:8080", "", false},
		{"example.com:8080", "", false},
		{"0.0.0.0:8080", "t", true},
		{"nonsense", "t", false},
	} {
		err := CheckAddr(tc.addr, tc.token)
		if (err == nil) != tc.ok {
			t.Errorf("CheckAddr(%q, token %q) = %v, want ok=%v", tc.addr, tc.token, err, tc.ok)
		}
	}
}

// The static assets are embedded and served without a network.
func TestStaticAssetsEmbedded(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	_, srv := f.serve(t, "")
	for _, p := range []string{"/static/vendor/htmx.min.js", "/static/vendor/uPlot.iife.min.js", "/static/vendor/uPlot.LICENSE", "/static/vendor/htmx.LICENSE", "/static/console.js"} {
		if st, b := get(t, srv.URL+p); st != http.StatusOK || len(b) < 100 {
			t.Errorf("GET %s = %d (%d bytes)", p, st, len(b))
		}
	}
	_, page := get(t, srv.URL+"/")
	if strings.Contains(page, "http://") || strings.Contains(page, "https://") {
		t.Errorf("the page refers to another origin:\n%s", page)
	}
}

// smap projects come from their progress hashes in Redis (state DB 1).
func TestJobsPageSmapProjects(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	rd := testkit.NewRedis(t, testkit.FakeOK(), testkit.WithRedisDB(1))
	prefix := rd.Prefix + "smap:proj:"
	tr, err := smap.NewTracker(rd.Client, smap.Config{KeyPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	ctx := testkit.Context(t)
	if _, err := tr.Start(ctx, "proj-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Discover(ctx, "proj-1", "a", "b", "c"); err != nil {
		t.Fatal(err)
	}
	if _, err := tr.Seal(ctx, "proj-1", 3); err != nil {
		t.Fatal(err)
	}
	for item, failed := range map[string]bool{"a": false, "b": true} {
		if _, err := tr.Count(ctx, "proj-1", item, failed); err != nil {
			t.Fatal(err)
		}
	}
	srv := serveConfig(t, Config{Kafka: f.k.Opts(t), Pipelines: []pipelines.Spec{f.spec}, JobsTopic: f.jobs, FlagsTopic: f.flags, Redis: rd.Client, SmapKeyPrefix: prefix})
	_, body := get(t, srv.URL+"/jobs")
	want := `<tr class="project" data-project="proj-1"><td>proj-1</td><td class="status">PROCESSING_WAIT</td>`
	if !strings.Contains(body, want) || !strings.Contains(body, `<td class="processed">2 / 3</td><td class="errors">1</td>`) {
		t.Fatalf("jobs page lacks proj-1 at 2/3 with 1 error:\n%s", body)
	}
	if strings.Count(body, `class="project"`) != 1 {
		t.Fatalf("the :items and :found sets were listed as projects:\n%s", body)
	}
}

// A read-only console answers only Host headers naming this machine: a
// page elsewhere that rebinds its name to 127.0.0.1 reads nothing.
func TestHostGuard(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	_, ro := f.serve(t, "")
	_, rw := f.serve(t, "op-token")
	for _, tc := range []struct {
		srv  *httptest.Server
		host string
		want int
	}{
		{ro, "evil.example:8080", http.StatusForbidden},
		{ro, "localhost:8080", http.StatusOK},
		{ro, "127.0.0.1:8080", http.StatusOK},
		{ro, "[::1]:8080", http.StatusOK},
		{rw, "console.internal:8080", http.StatusOK},
	} {
		req, _ := http.NewRequest(http.MethodGet, tc.srv.URL+"/dlq?topic="+url.QueryEscape(f.dlqTopic), nil)
		req.Host = tc.host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want || (tc.want == http.StatusForbidden && strings.Contains(string(b), "FPT")) {
			t.Errorf("Host %s: %d, want %d\n%.300s", tc.host, resp.StatusCode, tc.want, b)
		}
	}
}

// A declared DLQ topic that is not on the cluster reads as such, not as a
// failure.
func TestDeadLettersTopicMissing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.spec.Consumers = append(f.spec.Consumers, pipelines.Consumer{Group: f.group + "_2", Input: f.src, DLQ: testkit.Name(t, "absent")})
	_, srv := f.serve(t, "")
	status, body := get(t, srv.URL+"/dlq?topic="+url.QueryEscape(f.spec.Consumers[1].DLQ))
	if status != http.StatusOK || !strings.Contains(body, `id="missing"`) || strings.Contains(body, `id="counts"`) {
		t.Fatalf("missing topic: %d\n%s", status, body)
	}
}
