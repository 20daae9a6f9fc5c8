package console

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/stages/dlq"
)

// listLimit bounds the records the dead-letter page lists.
const (
	defaultListLimit = 50
	maxListLimit     = 1000
)

// countRow is the number of records of one reason × rule.
type countRow struct {
	Reason, Rule string
	N            int
}

type dlqData struct {
	Topics   []string
	Topic    string
	Args     dlq.FilterArgs
	Query    url.Values // the filter as query parameters (links, hidden fields)
	Counts   []countRow
	Total    int
	Matching int
	Records  []dlq.Record
	Limit    int
	More     bool
	// Missing: the topic is not on the cluster (the catalog was not
	// created, or under a prefix).
	Missing bool
}

// dlqTopics are the DLQ topics of the declared pipelines, sorted.
func (c *Console) dlqTopics() []string {
	var out []string
	for _, s := range c.cfg.Pipelines {
		for _, in := range s.Consumers {
			if in.DLQ != "" && !slices.Contains(out, in.DLQ) {
				out = append(out, in.DLQ)
			}
		}
	}
	sort.Strings(out)
	return out
}

// filterArgs reads the filter fields of a query or form (the names of the
// dlq inspect flags, source_topic for --source-topic).
func filterArgs(v url.Values) dlq.FilterArgs {
	list := func(name string) ([]string, bool) {
		vals, given := v[name]
		var out []string
		for _, s := range vals {
			for _, p := range strings.Split(s, ",") {
				if p = strings.TrimSpace(p); p != "" {
					out = append(out, p)
				}
			}
		}
		// A field left empty in the form is "no filter", unlike --rule=:
		// a browser sends every field; "(none)" selects records without one.
		given = given && len(out) > 0
		for i, s := range out {
			if s == "(none)" {
				out[i] = ""
			}
		}
		return out, given
	}
	a := dlq.FilterArgs{Since: v.Get("since"), Until: v.Get("until"), SourceTopic: strings.TrimSpace(v.Get("source_topic"))}
	a.Reasons, a.ReasonsGiven = list("reason")
	a.Rules, a.RulesGiven = list("rule")
	return a
}

// filterQuery is a's fields as query parameters.
func filterQuery(topic string, a dlq.FilterArgs) url.Values {
	q := url.Values{"topic": {topic}}
	none := func(l []string) string {
		out := make([]string, len(l))
		for i, s := range l {
			out[i] = s
			if s == "" {
				out[i] = "(none)"
			}
		}
		return strings.Join(out, ",")
	}
	for k, v := range map[string]string{"reason": none(a.Reasons), "rule": none(a.Rules), "since": a.Since, "until": a.Until, "source_topic": a.SourceTopic} {
		if v != "" {
			q.Set(k, v)
		}
	}
	return q
}

// topicOf returns the topic the request names (the first DLQ topic when
// none), or fails the request with 404 for a topic that is not a declared
// DLQ topic.
func (c *Console) topicOf(w http.ResponseWriter, v url.Values) (string, bool) {
	ts := c.dlqTopics()
	t := v.Get("topic")
	if t == "" && len(ts) > 0 {
		t = ts[0]
	}
	if !slices.Contains(ts, t) {
		c.fail(w, http.StatusNotFound, fmt.Sprintf("%q is not a dead-letter topic of a declared pipeline (known: %s)", t, strings.Join(ts, ", ")))
		return "", false
	}
	return t, true
}

func (c *Console) deadLetters(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	topic, ok := c.topicOf(w, q)
	if !ok {
		return
	}
	args := filterArgs(q)
	f, err := args.Filter(time.Now(), "")
	if err != nil {
		c.fail(w, http.StatusBadRequest, "bad filter: "+err.Error())
		return
	}
	limit := defaultListLimit
	if s := q.Get("limit"); s != "" {
		if limit, err = strconv.Atoi(s); err != nil || limit < 1 || limit > maxListLimit {
			c.fail(w, http.StatusBadRequest, fmt.Sprintf("bad limit %q: want 1 to %d", s, maxListLimit))
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
	defer cancel()
	d := dlqData{Topics: c.dlqTopics(), Topic: topic, Args: args, Query: filterQuery(topic, args), Limit: limit}
	exists, err := c.topicExists(ctx, topic)
	if err != nil {
		c.fail(w, http.StatusBadGateway, err.Error())
		return
	}
	if !exists {
		d := dlqData{Topics: c.dlqTopics(), Topic: topic, Args: args, Query: filterQuery(topic, args), Limit: limit, Missing: true}
		c.render(w, http.StatusOK, "dlq", "Dead letters", d)
		return
	}
	counts := map[[2]string]int{}
	// One read counts every record and keeps the first matching ones.
	err = dlq.Inspect(ctx, c.cfg.Kafka, topic, dlq.Filter{}, 0, func(rec dlq.Record) error {
		counts[[2]string{rec.Reason, rec.Rule}]++
		d.Total++
		if f.Match(rec) {
			d.Matching++
			if len(d.Records) < limit {
				d.Records = append(d.Records, rec)
			} else {
				d.More = true
			}
		}
		return nil
	})
	if err != nil {
		c.fail(w, http.StatusBadGateway, "reading "+topic+" failed: "+err.Error())
		return
	}
	for k, n := range counts {
		d.Counts = append(d.Counts, countRow{Reason: k[0], Rule: k[1], N: n})
	}
	sort.Slice(d.Counts, func(i, j int) bool {
		a, b := d.Counts[i], d.Counts[j]
		if a.N != b.N {
			return a.N > b.N
		}
		return a.Reason+"\x00"+a.Rule < b.Reason+"\x00"+b.Rule
	})
	c.render(w, http.StatusOK, "dlq", "Dead letters", d)
}

// decisionRow is one record of a redrive preview.
type decisionRow struct {
	Rec      dlq.Record
	Decision string
}

type redriveData struct {
	Topic     string
	Query     url.Values
	Selection []string // "partition:offset" of the selected records
	All       bool
	Preview   []decisionRow
	Result    *dlq.RedriveResult
	Confirmed bool
	Max       int
}

// redrive previews (action=preview: a dry run, nothing is sent) or
// performs (action=confirm) the redrive of the selected records, or of
// every record the filter matches when the form says all=1. Both need
// the CSRF token; confirm needs the operator token too. A request that
// selects nothing and has no filter is refused, as the CLI refuses a
// redrive without a filter.
func (c *Console) redrive(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		c.fail(w, http.StatusBadRequest, "bad form: "+err.Error())
		return
	}
	action := r.PostForm.Get("action")
	switch action {
	case "preview":
		if c.cfg.Token == "" {
			c.fail(w, http.StatusForbidden, "This console is read-only: start it with "+TokenEnv+" set to allow redrives.")
			return
		}
		if !equal(r.PostForm.Get("csrf"), c.csrf) {
			c.fail(w, http.StatusForbidden, "The form's CSRF token is missing or wrong: reload the page and try again.")
			return
		}
	case "confirm":
		if status, msg := c.authorizeWrite(r); status != 0 {
			c.fail(w, status, msg)
			return
		}
	default:
		c.fail(w, http.StatusBadRequest, fmt.Sprintf("bad action %q: want preview or confirm", action))
		return
	}
	topic, ok := c.topicOf(w, r.PostForm)
	if !ok {
		return
	}
	args := filterArgs(r.PostForm)
	f, err := args.Filter(time.Now(), "")
	if err != nil {
		c.fail(w, http.StatusBadRequest, "bad filter: "+err.Error())
		return
	}
	d := redriveData{Topic: topic, Query: filterQuery(topic, args), All: r.PostForm.Get("all") == "1", Max: dlq.DefaultMaxRedrives}
	for _, s := range r.PostForm["sel"] {
		p, o, ok := strings.Cut(s, ":")
		pn, err1 := strconv.ParseInt(p, 10, 32)
		on, err2 := strconv.ParseInt(o, 10, 64)
		if !ok || err1 != nil || err2 != nil || pn < 0 || on < 0 {
			c.fail(w, http.StatusBadRequest, fmt.Sprintf("bad selection %q: want PARTITION:OFFSET", s))
			return
		}
		f.At = append(f.At, dlq.Position{Partition: int32(pn), Offset: on})
		d.Selection = append(d.Selection, s)
	}
	switch {
	case len(f.At) == 0 && !d.All:
		c.fail(w, http.StatusBadRequest, "nothing selected: tick the records to redrive, or choose “every record the filter matches”")
		return
	case f.Empty() && r.PostForm.Get("everything") != "1":
		c.fail(w, http.StatusBadRequest, "no filter: redriving the whole topic needs the “the whole topic” box ticked")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Minute)
	defer cancel()
	req := dlq.RedriveRequest{DLQTopic: topic, Filter: f, DryRun: action == "preview", MaxRedrives: dlq.DefaultMaxRedrives,
		Each: func(rec dlq.Record, dec dlq.Decision) {
			if len(d.Preview) < maxListLimit {
				d.Preview = append(d.Preview, decisionRow{Rec: rec, Decision: dec.String()})
			}
		}}
	res, err := dlq.Redrive(ctx, c.cfg.Kafka, req)
	if err != nil {
		c.fail(w, http.StatusBadGateway, fmt.Sprintf("redrive stopped after sending %d: %v", res.Sent, err))
		return
	}
	d.Result, d.Confirmed = &res, action == "confirm"
	if d.Confirmed {
		c.cfg.Logger.Info("console: redrive", "topic", topic, "sent", res.Sent, "refused", res.Refused, "unroutable", res.Unroutable)
	}
	c.render(w, http.StatusOK, "redrive", "Redrive", d)
}
