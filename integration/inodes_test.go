package integration

import (
	"strings"
	"testing"

	"github.com/agentbox/agentbox/api"
)

// TestInodesUnique: a file a sandbox makes never takes the (st_dev,
// st_ino) of another file of its root, and so never reads as another
// file. Before the storage pool gave each writable layer an inode floor
// (internal/storage/inofloor_linux.go), new files in the layer took the
// inode numbers of the template's files: on gvisor the gofer then shared
// one inode between the two, and /bin/busybox read as a new file's bytes
// (Chromium crashed on its memory-mapped cache, 2 runs in 8).
func TestInodesUnique(t *testing.T) {
	for _, iso := range []string{"container", "gvisor"} {
		t.Run(iso, func(t *testing.T) {
			t.Parallel()
			id := newSandbox(t, api.CreateSandboxRequest{Isolation: iso})
			// Hash the template's files (their inodes are now known to the
			// sandbox's kernel), make 1,500 files, read each back, and hash
			// the template's files again.
			out := mustSh(t, id, `set -e
sums() { find / -xdev -type f -path '/[be]*' -exec md5sum {} + | sort; }
before=$(sums)
mkdir -p /root/many
i=0; while [ $i -lt 1500 ]; do echo "file $i" > /root/many/f$i; i=$((i+1)); done
i=0; while [ $i -lt 1500 ]; do
	got=$(cat /root/many/f$i)
	[ "$got" = "file $i" ] || { echo "f$i reads as: $(head -c 40 /root/many/f$i | od -c | head -1)"; exit 1; }
	i=$((i+1))
done
after=$(sums)
[ "$before" = "$after" ] || { echo "template files changed:"; echo "$after" | head -5; exit 1; }
echo "files: $(echo "$before" | wc -l)"
# Every file with one link has its own (dev, inode).
find / -xdev -type f -exec stat -c '%h %d:%i %n' {} + | awk '$1 == 1 {print $2, $3}' | sort | awk '$1 == k {print "shared", $1, $2, n} {k = $1; n = $2}' | head -5`)
			if strings.Contains(out, "shared") || !strings.Contains(out, "files: ") {
				t.Fatalf("%s:\n%s", iso, out)
			}
			t.Logf("%s: %s", iso, strings.SplitN(out, "\n", 2)[0])
		})
	}
}
