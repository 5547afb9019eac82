package ring

import "fmt"

func newURing(cfg Config) (Ring, error) {
	return nil, fmt.Errorf("%w: io_uring backend not built yet", ErrUnavailable)
}
