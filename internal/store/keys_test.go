package store

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/agentbox/agentbox/errdefs"
)

func TestKeys(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	k1 := &KeyRecord{ID: "key_aaaaaaaaaaaa", Tenant: "default", Name: "admin", Hash: []byte("hash-1"), Admin: true}
	k2 := &KeyRecord{ID: "key_bbbbbbbbbbbb", Tenant: "acme", Name: "ci", Hash: []byte("hash-2"),
		CreatedAt: time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)}
	for _, k := range []*KeyRecord{k1, k2} {
		if err := s.CreateKey(ctx, k); err != nil {
			t.Fatal(err)
		}
	}

	tests := []struct {
		name string
		k    *KeyRecord
		want error
	}{
		{"duplicate id", &KeyRecord{ID: k1.ID, Tenant: "x", Hash: []byte("other")}, errdefs.ErrAlreadyExists},
		{"duplicate hash", &KeyRecord{ID: "key_cccccccccccc", Tenant: "x", Hash: k2.Hash}, errdefs.ErrAlreadyExists},
		{"no hash", &KeyRecord{ID: "key_dddddddddddd", Tenant: "x"}, errdefs.ErrInvalidArgument},
		{"no tenant", &KeyRecord{ID: "key_dddddddddddd", Hash: []byte("h")}, errdefs.ErrInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := s.CreateKey(ctx, tt.k); !errors.Is(err, tt.want) {
				t.Errorf("CreateKey = %v, want %v", err, tt.want)
			}
		})
	}

	got, err := s.KeyByHash(ctx, []byte("hash-1"))
	if err != nil || !reflect.DeepEqual(got, k1) {
		t.Errorf("KeyByHash = %+v, %v; want %+v", got, err, k1)
	}
	if _, err := s.KeyByHash(ctx, []byte("nope")); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("KeyByHash(unknown) = %v, want ErrNotFound", err)
	}

	list, err := s.ListKeys(ctx, "")
	if err != nil || len(list) != 2 || list[0].ID != k1.ID || list[1].ID != k2.ID {
		t.Errorf("ListKeys(all) = %+v, %v", list, err)
	}
	list, err = s.ListKeys(ctx, "acme")
	if err != nil || len(list) != 1 || !reflect.DeepEqual(list[0], k2) {
		t.Errorf("ListKeys(acme) = %+v, %v", list, err)
	}

	used := time.Date(2032, 5, 5, 5, 5, 5, 5e6, time.UTC)
	if err := s.TouchKey(ctx, k2.ID, used); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.KeyByHash(ctx, k2.Hash); got.LastUsedAt == nil || !got.LastUsedAt.Equal(used) {
		t.Errorf("LastUsedAt = %v, want %v", got.LastUsedAt, used)
	}

	if err := s.RevokeKey(ctx, k2.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.KeyByHash(ctx, k2.Hash); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("KeyByHash(revoked) = %v, want ErrNotFound", err)
	}
	list, _ = s.ListKeys(ctx, "acme")
	if len(list) != 1 || list[0].RevokedAt == nil {
		t.Fatalf("revoked key in ListKeys = %+v; want listed with RevokedAt", list)
	}
	first := *list[0].RevokedAt
	time.Sleep(5 * time.Millisecond)
	if err := s.RevokeKey(ctx, k2.ID); err != nil {
		t.Errorf("second revoke = %v, want nil", err)
	}
	list, _ = s.ListKeys(ctx, "acme")
	if !list[0].RevokedAt.Equal(first) {
		t.Errorf("second revoke moved RevokedAt from %v to %v", first, list[0].RevokedAt)
	}
	if err := s.RevokeKey(ctx, "key_missing"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("RevokeKey(missing) = %v, want ErrNotFound", err)
	}
	if _, err := s.KeyByHash(ctx, k1.Hash); err != nil {
		t.Errorf("revoking k2 affected k1: %v", err)
	}
}
