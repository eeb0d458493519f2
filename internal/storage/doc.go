// Package storage is the daemon's disk: a btrfs pool on a sparse loop file,
// holding read-only template root filesystems and one private writable
// layer per sandbox.
//
// Layout under Options.DataDir:
//
//	storage.img                          the pool's backing file (sparse)
//	storage/                             its mount point
//	storage/templates/<name>/<version>/  a read-only subvolume per template
//	                                     version: rootfs/ and template.json
//	storage/sandboxes/<id>/              a subvolume per sandbox: upper/ and
//	                                     work/, the overlayfs upper and work
//	                                     directories over a template's rootfs
//
// Each sandbox subvolume has a btrfs qgroup with a limit on referenced
// bytes, so a sandbox that fills its disk gets EDQUOT at its disk_mb while
// the host and its neighbours are unaffected. Subvolumes and qgroups are
// made with btrfs ioctls (see btrfs_linux.go), which keeps CreateLayer
// around a millisecond; the btrfs CLI is used only to set the pool up.
//
// Beside layers (layer_linux.go, pool_linux.go) the package holds what
// fills and copies them: template versions and their owners (template*.go,
// owner*.go: a tenant's templates are its own; whom a call acts for is
// the principal of internal/tenancy, and a call without one is refused), build steps applied layer
// by layer with a content-addressed cache (build_linux.go, untar_linux.go
// for tar layers), OCI image import (image_linux.go), snapshots of a
// sandbox's layer (snapshot_linux.go, copy_linux.go) and the exchange of a
// layer under a running sandbox for reset (layer_exchange_linux.go).
//
// Sandbox uids 0..UIDCount-1 map to host uids UIDBase..: template files are
// stored with their ownership shifted by UIDBase, and a layer's upper/ and
// work/ belong to UIDBase, so the guest, root in the sandbox's user
// namespace, can mount the overlay itself.
package storage
