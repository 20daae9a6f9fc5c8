package trades

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
)

// Token fields of a broker_connections row, bound into a sealed token so
// that an access token cannot be swapped for a refresh token or moved to
// another row.
const (
	TokenAccess  = "access"
	TokenRefresh = "refresh"
)

// tokenVersion is the first byte of a sealed token: the format and key
// generation, so that a later key rotation can tell old tokens apart.
const tokenVersion = 1

// tokenKeyBytes is the key size: AES-256.
const tokenKeyBytes = 32

// TokenSealer seals broker tokens for broker_connections.access_enc and
// refresh_enc with AES-256-GCM under BROKER_TOKEN_KEY. A sealed token is
// version byte (1) ‖ 12-byte random nonce ‖ ciphertext and tag; the
// additional data binds it to its row and field (user_id, broker, field).
// A TokenSealer is safe for concurrent use; printing or logging it shows no
// key material.
type TokenSealer struct {
	aead cipher.AEAD
}

// errTokenKey is the one error of a malformed key: it says what is
// expected and never anything of what was given.
var errTokenKey = fmt.Errorf("BROKER_TOKEN_KEY must be %d bytes written as %d hex digits or in base64", tokenKeyBytes, 2*tokenKeyBytes)

// ParseTokenKey builds a TokenSealer from the value of BROKER_TOKEN_KEY:
// 32 bytes as 64 hex digits or in base64 (standard or URL alphabet, padded
// or not); surrounding white space is ignored. Errors never contain the
// value or any part of it.
func ParseTokenKey(value string) (*TokenSealer, error) {
	value = strings.TrimSpace(value)
	if value == "" {
		return nil, errors.New("BROKER_TOKEN_KEY is empty")
	}
	key := decodeTokenKey(value)
	if len(key) != tokenKeyBytes {
		return nil, errTokenKey
	}
	block, err := aes.NewCipher(key)
	if err != nil { // cannot happen for 32 bytes; the error would name only the size
		return nil, errTokenKey
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, errTokenKey
	}
	return &TokenSealer{aead: aead}, nil
}

// decodeTokenKey returns the key bytes of value, or nil. Decoder errors are
// dropped: some quote the offending character.
func decodeTokenKey(value string) []byte {
	if len(value) == 2*tokenKeyBytes {
		if b, err := hex.DecodeString(value); err == nil {
			return b
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(value); err == nil {
			return b
		}
	}
	return nil
}

func tokenAAD(userID, broker, field string) []byte {
	return []byte("sluice.broker_token.v1|" + userID + "|" + broker + "|" + field)
}

// Seal encrypts token for the field (TokenAccess or TokenRefresh) of the
// broker_connections row (userID, broker). Every call uses a fresh random
// nonce, so sealing the same token twice gives different bytes.
func (s *TokenSealer) Seal(token []byte, userID, broker, field string) ([]byte, error) {
	out := make([]byte, 1+s.aead.NonceSize(), 1+s.aead.NonceSize()+len(token)+s.aead.Overhead())
	out[0] = tokenVersion
	if _, err := rand.Read(out[1:]); err != nil {
		return nil, fmt.Errorf("broker token: nonce: %w", err)
	}
	return s.aead.Seal(out, out[1:], token, tokenAAD(userID, broker, field)), nil
}

// Open decrypts a token sealed by Seal for the same row and field. It fails
// for another key, another row or field, or altered bytes; the error says
// nothing of the token.
func (s *TokenSealer) Open(sealed []byte, userID, broker, field string) ([]byte, error) {
	n := s.aead.NonceSize()
	if len(sealed) < 1+n+s.aead.Overhead() || sealed[0] != tokenVersion {
		return nil, errors.New("broker token: not a sealed token of version 1")
	}
	token, err := s.aead.Open(nil, sealed[1:1+n], sealed[1+n:], tokenAAD(userID, broker, field))
	if err != nil {
		return nil, errors.New("broker token: cannot open (another key, another row or field, or altered)")
	}
	return token, nil
}

// String implements fmt.Stringer without key material.
func (s *TokenSealer) String() string { return "TokenSealer{redacted}" }

// GoString implements fmt.GoStringer without key material.
func (s *TokenSealer) GoString() string { return s.String() }

// LogValue implements slog.LogValuer without key material.
func (s *TokenSealer) LogValue() slog.Value { return slog.StringValue(s.String()) }
