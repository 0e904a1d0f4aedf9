package workflow

import novav1 "github.com/novaflow/nova/proto/nova/v1"

// How a run of cached code has its output checked (cache_validate).
const (
	// CacheValidateRules runs the deterministic output checks only: the code
	// was accepted by the model-based check when it was generated.
	CacheValidateRules = "rules"
	// CacheValidateModel consults the output validator's model as well.
	CacheValidateModel = "model"
)

func validCacheValidate(s string) bool {
	return s == "" || s == CacheValidateRules || s == CacheValidateModel
}

// CacheEnabled tells whether AI node n of def may reuse cached code and add
// to the cache: the node's cache setting, else the workflow's, else yes.
func CacheEnabled(def *novav1.WorkflowDefinition, n *novav1.Node) bool {
	if n.Cache != nil {
		return n.GetCache()
	}
	if def.Cache != nil {
		return def.GetCache()
	}
	return true
}

// CacheValidate is how a run of cached code of node n has its output
// checked: the node's cache_validate, else the workflow's, else rules.
func CacheValidate(def *novav1.WorkflowDefinition, n *novav1.Node) string {
	if v := n.GetCacheValidate(); v != "" {
		return v
	}
	if v := def.GetCacheValidate(); v != "" {
		return v
	}
	return CacheValidateRules
}
