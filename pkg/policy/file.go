package policy

import (
	"fmt"
	"io"
	"os"
)

// ReadFile reads a file named where files are allowed (the command line):
// only a regular file (not /dev/zero, a FIFO or a directory, which would
// fill memory or block), and at most limit bytes (Limits.FileBytes).
func ReadFile(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// Stat of the open file, not of the path: the file read is the one
	// checked.
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s): give the path of a file", path, fi.Mode().Type())
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("%s is %d bytes, above the limit: larger than %d bytes, the operator's cap on a file danki reads (--max-file-bytes)", path, fi.Size(), limit)
	}
	data, err := ReadAtMost(f, limit)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return data, nil
}

// ReadAtMost reads r up to limit bytes; more is an error, never a silently
// truncated (and then unparseable or partial) read.
func ReadAtMost(r io.Reader, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("larger than %d bytes, the operator's cap on a file danki reads (--max-file-bytes)", limit)
	}
	return data, nil
}
