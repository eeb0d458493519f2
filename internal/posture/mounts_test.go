package posture

import (
	"strings"
	"testing"
)

func TestMountinfoLeaks(t *testing.T) {
	hostPaths := []string{"/var/lib/agentbox", "/run/agentbox"}
	for _, c := range []struct {
		name, line string
		leak       bool
	}{
		{"overlay by fd", "40 39 0:50 / / rw,nodev,relatime - overlay overlay rw,lowerdir=/proc/self/fd/7:/proc/self/fd/8,upperdir=/proc/self/fd/9,workdir=/proc/self/fd/10,userxattr", false},
		{"overlay by path", "40 39 0:50 / / rw - overlay overlay rw,lowerdir=/var/lib/agentbox/storage/templates/base/1/rootfs,upperdir=/x/upper,workdir=/x/work", true},
		{"dev null bind", "45 40 0:5 /null /proc/kcore rw,nosuid - devtmpfs devtmpfs rw,size=1k", false},
		{"lxcfs bind", "46 40 0:45 /proc/meminfo /proc/meminfo ro,nosuid,nodev - fuse.lxcfs lxcfs rw,user_id=0,group_id=0,allow_other", false},
		{"gvisor 9p root", "16 15 0:18 / / rw - 9p none rw,trans=fd,rfdno=4,wfdno=4,aname=/,dcache=1000", false},
		{"host dir bind", "47 40 8:1 /home/alice/data /data rw - ext4 /dev/sda1 rw", true},
		{"daemon path in a tmpfs", "48 40 0:30 /run/agentbox/sandboxes/x /etc/x rw - tmpfs tmpfs rw", true},
		{"source path", "49 40 0:31 / /mnt rw - fuse.sshfs /srv/export rw", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := MountinfoLeaks(c.line+"\n", hostPaths)
			if (len(got) > 0) != c.leak {
				t.Errorf("MountinfoLeaks(%q) = %v, want leak=%v", c.line, got, c.leak)
			}
			if c.leak && !strings.Contains(strings.Join(got, " "), "/") {
				t.Errorf("the finding should name what leaked: %v", got)
			}
		})
	}
}
