// Command etcd is etcd's own server, built from the Go module proxy at the
// version pinned in go.mod (see test/lab/build.sh).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
