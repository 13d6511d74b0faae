//go:build tools

// Package tools pins the project's chosen dependencies before the code that
// uses them lands, so parallel work shares one go.mod.
package tools

import (
	_ "github.com/dop251/goja"
	_ "github.com/hashicorp/go-hclog"
	_ "github.com/knadh/koanf/providers/env/v2"
	_ "github.com/knadh/koanf/v2"
	_ "github.com/meilisearch/meilisearch-go"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/rogpeppe/go-internal/testscript"
	_ "go.mongodb.org/mongo-driver/v2/mongo"
)
