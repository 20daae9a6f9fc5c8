package objstore

import (
	"context"
	"strings"
)

// Prefixed is a Store that keeps every key under a fixed prefix of another
// Store, e.g. to give each test or tenant its own key space in one bucket.
// Keys passed to and returned by Prefixed are relative to the prefix.
type Prefixed struct {
	inner  Store
	prefix string
}

var _ Store = (*Prefixed)(nil)

// WithPrefix returns s restricted to keys under prefix (which should end in
// "/"; an empty prefix returns a Prefixed equivalent to s).
func WithPrefix(s Store, prefix string) *Prefixed { return &Prefixed{inner: s, prefix: prefix} }

// Put implements Store.
func (p *Prefixed) Put(ctx context.Context, key string, data []byte, contentType string) error {
	if err := ValidKey(key); err != nil {
		return err
	}
	return p.inner.Put(ctx, p.prefix+key, data, contentType)
}

// Get implements Store.
func (p *Prefixed) Get(ctx context.Context, key string) ([]byte, error) {
	if err := ValidKey(key); err != nil {
		return nil, err
	}
	return p.inner.Get(ctx, p.prefix+key)
}

// Stat implements Store.
func (p *Prefixed) Stat(ctx context.Context, key string) (Info, error) {
	if err := ValidKey(key); err != nil {
		return Info{}, err
	}
	in, err := p.inner.Stat(ctx, p.prefix+key)
	in.Key = strings.TrimPrefix(in.Key, p.prefix)
	return in, err
}

// List implements Store.
func (p *Prefixed) List(ctx context.Context, prefix string) ([]Info, error) {
	if err := validPrefix(prefix); err != nil {
		return nil, err
	}
	infos, err := p.inner.List(ctx, p.prefix+prefix)
	for i := range infos {
		infos[i].Key = strings.TrimPrefix(infos[i].Key, p.prefix)
	}
	return infos, err
}

// Delete implements Store.
func (p *Prefixed) Delete(ctx context.Context, key string) error {
	if err := ValidKey(key); err != nil {
		return err
	}
	return p.inner.Delete(ctx, p.prefix+key)
}
