package network

import (
	"testing"

	"golang.org/x/sys/unix"
)

// Interface names derived from an id fit IFNAMSIZ for the ids of a daemon
// with node_id (15 characters) as for those without (12).
func TestLinkNamesFitIFNAMSIZ(t *testing.T) {
	for _, id := range []string{"abcdefgh2345", "n2aabcdefgh2345"} {
		for _, name := range []string{HostVeth(id), IfbName(id)} {
			if len(name) > unix.IFNAMSIZ-1 {
				t.Errorf("interface name %q of sandbox %s is %d characters; the most is %d", name, id, len(name), unix.IFNAMSIZ-1)
			}
		}
	}
	if HostVeth("n2aabcdefgh2345") != "abxabcdefgh2345" || HostVeth("abcdefgh2345") != "abxabcdefgh2345" {
		t.Errorf("HostVeth = %q, %q", HostVeth("n2aabcdefgh2345"), HostVeth("abcdefgh2345"))
	}
	keep := linkIDs(map[string]bool{"n2aabcdefgh2345": true, "zzzzzzzzzzzz": false})
	if !keep["abcdefgh2345"] || len(keep) != 1 {
		t.Errorf("linkIDs = %v", keep)
	}
}
