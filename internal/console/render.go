package console

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"
)

// funcs are the template helpers.
var funcs = template.FuncMap{
	"text":   asText,
	"pct":    func(f float64) string { return fmt.Sprintf("%.1f", 100*f) },
	"rate":   func(f float64) string { return fmt.Sprintf("%.1f", f) },
	"utc":    func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"ms":     func(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339) },
	"join":   strings.Join,
	"offset": func(o int64) string { return map[bool]string{true: "-", false: fmt.Sprint(o)}[o < 0] },
	"pct100": func(f float64) int { return int(min(max(f, 0), 1) * 100) },
	"deref":  func(b *bool) bool { return *b },
}

// asText is b for display: the text itself when it is UTF-8 (html/template
// escapes it), else "base64:" and its base64.
func asText(b []byte) string {
	if utf8.Valid(b) {
		return string(b)
	}
	return "base64:" + base64.StdEncoding.EncodeToString(b)
}

// page is what every page template gets.
type page struct {
	Title    string
	Nav      string
	ReadOnly bool
	CSRF     string
	Data     any
}

// render executes the named page template; a template error is a 500.
func (c *Console) render(w http.ResponseWriter, status int, name, title string, data any) {
	var b bytes.Buffer
	p := page{Title: title, Nav: name, ReadOnly: c.cfg.Token == "", CSRF: c.csrf, Data: data}
	if err := c.tmpl.ExecuteTemplate(&b, name+".html", p); err != nil {
		c.cfg.Logger.Error("console: render", "page", name, "err", err)
		http.Error(w, "console: render "+name+": internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b.Bytes())
}

// fail renders the error page with status and an explanation (escaped).
func (c *Console) fail(w http.ResponseWriter, status int, msg string) {
	c.render(w, status, "error", http.StatusText(status), struct {
		Status int
		Msg    string
	}{status, msg})
}
