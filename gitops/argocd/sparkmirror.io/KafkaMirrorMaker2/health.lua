-- Argo CD health check for sparkmirror.io/KafkaMirrorMaker2, read from the conditions sparkmirror's operator
-- writes (operator/sparkmirror_operator/status.py). Install it as argocd-cm's
-- `resource.customizations.health.sparkmirror.io_KafkaMirrorMaker2` (see gitops/README.md).
-- Argo CD runs Lua 5.1 (gopher-lua) with the package, base, table and a reduced os library only (no string
-- library unless useOpenLibs): keep to those.
local hs = {}

local function condition_map(conditions)
  local by_type = {}
  for _, c in ipairs(conditions or {}) do
    if c.type ~= nil then
      by_type[c.type] = c
    end
  end
  return by_type
end

local function describe(c)
  if c == nil then
    return ""
  end
  if c.reason ~= nil and c.message ~= nil and c.message ~= "" then
    return c.reason .. ": " .. c.message
  end
  return c.message or c.reason or ""
end

if obj.status == nil or obj.status.conditions == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to report a status"
  return hs
end

-- conditions about an older spec say nothing about this one
if obj.metadata ~= nil and obj.metadata.generation ~= nil and obj.status.observedGeneration ~= obj.metadata.generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to act on generation " .. tostring(obj.metadata.generation)
  return hs
end

local c = condition_map(obj.status.conditions)
local function is_true(t)
  return c[t] ~= nil and c[t].status == "True"
end

-- Stalled: needs a change (spec, Secret, credentials); Degraded: also transient trouble such as an
-- unreachable cluster. Either way the mirror is not doing what the spec asks.
for _, t in ipairs({"Stalled", "Degraded"}) do
  if is_true(t) then
    hs.status = "Degraded"
    hs.message = describe(c[t])
    return hs
  end
end
if is_true("Ready") then
  hs.status = "Healthy"
  hs.message = describe(c.Ready)
  return hs
end
if c.Ready ~= nil and (c.Ready.reason == "Paused" or c.Ready.reason == "Stopped") and not is_true("Reconciling") then
  hs.status = "Suspended"
  hs.message = describe(c.Ready)
  return hs
end
hs.status = "Progressing"
if is_true("Reconciling") then
  hs.message = describe(c.Reconciling)
else
  hs.message = describe(c.Ready)
end
return hs
