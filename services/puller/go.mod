module github.com/weftio/weft/services/puller

go 1.26.0
