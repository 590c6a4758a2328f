package malloc

import (
	"fmt"

	"github.com/rbscope/rbscope/internal/target"
)

// newMallocng returns the sizer of musl's mallocng.
func newMallocng(r Reader, maps []target.Mapping) (Allocator, error) {
	return nil, fmt.Errorf("musl's mallocng metadata is not read yet")
}
