package storage

import (
	"testing"
	"unsafe"
)

// The values on the right were printed by a C program including
// <linux/btrfs.h> (kernel 6.18 headers); a layout mistake here would make
// the kernel read garbage.
func TestIoctlLayout(t *testing.T) {
	tests := []struct {
		name      string
		got, want uintptr
	}{
		{"sizeof vol_args", unsafe.Sizeof(btrfsVolArgs{}), 4096},
		{"sizeof qgroup_limit_args", unsafe.Sizeof(btrfsQgroupLimitArgs{}), 48},
		{"sizeof qgroup_create_args", unsafe.Sizeof(btrfsQgroupCreateArgs{}), 16},
		{"sizeof ino_lookup_args", unsafe.Sizeof(btrfsInoLookupArgs{}), 4096},
		{"sizeof search_key", unsafe.Sizeof(btrfsSearchKey{}), 104},
		{"sizeof search_args", unsafe.Sizeof(btrfsSearchArgs{}), 4096},
		{"sizeof fs_info_args", unsafe.Sizeof(btrfsFsInfoArgs{}), 1024},
		{"BTRFS_IOC_SUBVOL_CREATE", iocSubvolCreate, 0x5000940e},
		{"BTRFS_IOC_SNAP_DESTROY", iocSnapDestroy, 0x5000940f},
		{"BTRFS_IOC_QGROUP_LIMIT", iocQgroupLimit, 0x8030942b},
		{"BTRFS_IOC_QGROUP_CREATE", iocQgroupCreate, 0x4010942a},
		{"BTRFS_IOC_INO_LOOKUP", iocInoLookup, 0xd0009412},
		{"BTRFS_IOC_SUBVOL_GETFLAGS", iocSubvolGetflags, 0x80089419},
		{"BTRFS_IOC_SUBVOL_SETFLAGS", iocSubvolSetflags, 0x4008941a},
		{"BTRFS_IOC_TREE_SEARCH", iocTreeSearch, 0xd0009411},
		{"BTRFS_IOC_FS_INFO", iocFsInfo, 0x8400941f},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("got %#x, want %#x", tt.got, tt.want)
			}
		})
	}
}

func TestUnescapeMount(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/var/lib/agentbox/storage", "/var/lib/agentbox/storage"},
		{`/tmp/a\040b`, "/tmp/a b"},
		{`/tmp/tab\011x`, "/tmp/tab\tx"},
		{`/tmp/end\`, `/tmp/end\`},
		{`/tmp/bad\09`, `/tmp/bad\09`},
	}
	for _, tt := range tests {
		if got := unescapeMount(tt.in); got != tt.want {
			t.Errorf("unescapeMount(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
