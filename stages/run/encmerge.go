package run

// EncodedMerger is implemented by an [Encoder] that merges an output into
// the encoding of an earlier one directly: a window whose sink implements
// it calls AppendMerged instead of Decode, [Merger.Merge] and
// AppendEncoded, sparing the decoded value the window would allocate and
// discard at every merge.
type EncodedMerger[T any] interface {
	// AppendMerged appends to dst the encoding of Merge(Decode(old), next)
	// and returns the extended slice. old is an encoding AppendEncoded or
	// AppendMerged produced; it must not be modified, nor referred to once
	// AppendMerged returns (the window reuses its memory), and it does not
	// overlap dst. An error (old is not a valid encoding) is a fatal error
	// of the runner. Safe for concurrent use.
	AppendMerged(dst, old []byte, next T) ([]byte, error)
}

// KeyAppender is implemented by a [Merger] that can append an output's
// MergeKey to a buffer: a window then looks keys up without allocating and
// copies a key only when it is new, so that the key it holds is a string
// of its own (not part of a larger allocation of the output, which the
// window would keep alive).
type KeyAppender[T any] interface {
	// AppendMergeKey appends MergeKey(o) to dst and returns the extended
	// slice. Safe for concurrent use.
	AppendMergeKey(dst []byte, o T) []byte
}

// EncodedKeyer is implemented by an [Encoder] whose encodings hold their
// output's merge key: a window then stores no copy of the key beside the
// encoding (the silver benchmark's keys took a tenth of its window's
// bytes), and reads it from the encoding to compare keys whose hashes
// match.
type EncodedKeyer interface {
	// AppendEncodedKey appends to dst the MergeKey of the output encoded
	// in enc (by AppendEncoded or EncodedMerger.AppendMerged) and returns
	// the extended slice. It must not modify enc nor refer to it once it
	// returns. An error (enc is not a valid encoding) is a fatal error of
	// the runner. Safe for concurrent use.
	AppendEncodedKey(dst, enc []byte) ([]byte, error)
}
