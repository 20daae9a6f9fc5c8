package trades

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

func testKey() []byte {
	k := make([]byte, 32)
	for i := range k {
		k[i] = byte(0xA0 + i)
	}
	return k
}

func TestTokenKeyFormats(t *testing.T) {
	k := testKey()
	for name, v := range map[string]string{
		"hex":             hex.EncodeToString(k),
		"upper hex":       strings.ToUpper(hex.EncodeToString(k)),
		"base64":          base64.StdEncoding.EncodeToString(k),
		"raw url base64":  base64.RawURLEncoding.EncodeToString(k),
		"with a newline":  hex.EncodeToString(k) + "\n",
		"url base64 padd": base64.URLEncoding.EncodeToString(k),
	} {
		s, err := ParseTokenKey(v)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		// Every form is the same key: a token sealed under one opens under
		// the hex form.
		ref, _ := ParseTokenKey(hex.EncodeToString(k))
		sealed, err := s.Seal([]byte("tok"), "u1", "coinbase", TokenAccess)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := ref.Open(sealed, "u1", "coinbase", TokenAccess); err != nil || string(got) != "tok" {
			t.Errorf("%s: opened %q, %v", name, got, err)
		}
	}
}

// Key errors say what is expected, never what was given: two malformed keys
// of the same shape give the same message, and none quotes its key.
func TestTokenKeyErrorsDoNotEchoTheKey(t *testing.T) {
	secret := "s3cr3t-" + strings.Repeat("q", 57) // 64 characters, not hex
	bad := []string{
		secret,
		strings.Repeat("g", 64),                          // hex decoders quote the bad byte
		hex.EncodeToString(testKey())[:63],               // 63 hex digits
		hex.EncodeToString(testKey()) + "00",             // 33 bytes
		base64.StdEncoding.EncodeToString(testKey()[1:]), // 31 bytes
		"AES256:" + hex.EncodeToString(testKey()),
		"%%%%",
	}
	var msgs []string
	for _, v := range bad {
		_, err := ParseTokenKey(v)
		if err == nil {
			t.Errorf("key %q accepted", v)
			continue
		}
		msgs = append(msgs, err.Error())
		for i := 0; i+4 <= len(v); i++ {
			if strings.Contains(err.Error(), v[i:i+4]) {
				t.Errorf("error %q quotes %q of the key", err, v[i:i+4])
				break
			}
		}
	}
	for _, m := range msgs[1:] {
		if m != msgs[0] {
			t.Errorf("messages differ: %q vs %q", msgs[0], m)
		}
	}
	if _, err := ParseTokenKey("  "); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Errorf("blank key: %v", err)
	}
}

func TestTokenSealOpen(t *testing.T) {
	s, err := ParseTokenKey(hex.EncodeToString(testKey()))
	if err != nil {
		t.Fatal(err)
	}
	token := []byte("access-token-value")
	a, err := s.Seal(token, "u1", "coinbase", TokenAccess)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := s.Seal(token, "u1", "coinbase", TokenAccess)
	if bytes.Equal(a, b) {
		t.Error("two seals of one token are equal: the nonce is not fresh")
	}
	if bytes.Contains(a, token) || a[0] != 1 || len(a) != 1+12+len(token)+16 {
		t.Errorf("sealed %x", a)
	}
	if got, err := s.Open(a, "u1", "coinbase", TokenAccess); err != nil || !bytes.Equal(got, token) {
		t.Fatalf("open = %q, %v", got, err)
	}

	other := testKey()
	other[0] ^= 1
	otherSealer, _ := ParseTokenKey(hex.EncodeToString(other))
	tampered := bytes.Clone(a)
	tampered[len(tampered)-1] ^= 1
	version2 := bytes.Clone(a)
	version2[0] = 2
	cases := []struct {
		name                string
		s                   *TokenSealer
		sealed              []byte
		user, broker, field string
	}{
		{"another user", s, a, "u2", "coinbase", TokenAccess},
		{"another broker", s, a, "u1", "binance", TokenAccess},
		{"the refresh field", s, a, "u1", "coinbase", TokenRefresh},
		{"another key", otherSealer, a, "u1", "coinbase", TokenAccess},
		{"altered", s, tampered, "u1", "coinbase", TokenAccess},
		{"another version", s, version2, "u1", "coinbase", TokenAccess},
		{"truncated", s, a[:20], "u1", "coinbase", TokenAccess},
		{"empty", s, nil, "u1", "coinbase", TokenAccess},
	}
	for _, c := range cases {
		got, err := c.s.Open(c.sealed, c.user, c.broker, c.field)
		if err == nil {
			t.Errorf("%s: opened %q", c.name, got)
		} else if strings.Contains(err.Error(), string(token)) {
			t.Errorf("%s: error quotes the token", c.name)
		}
	}
}

func TestTokenSealerPrintsNoKey(t *testing.T) {
	k := testKey()
	s, _ := ParseTokenKey(hex.EncodeToString(k))
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("built", "sealer", s)
	out := fmt.Sprintf("%v %+v %#v %s", s, s, s, s) + logged.String()
	if !strings.Contains(out, "redacted") || strings.Contains(out, hex.EncodeToString(k)[:8]) ||
		strings.Contains(out, fmt.Sprint(k[:4])[1:12]) {
		t.Errorf("printed %s", out)
	}
}
