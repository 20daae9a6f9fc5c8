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
