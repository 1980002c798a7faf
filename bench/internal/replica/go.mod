module github.com/convoy-gcs/convoy/bench/internal/replica

go 1.26.0
