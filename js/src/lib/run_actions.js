// Which RunPanel actions a state allows, and why not when it does not (said on the disabled button).
export const ACTIONS = ["stop", "pause", "resume", "checkpoint"];
const LIVE = new Set(["starting", "running", "paused"]);

export function allowed(state, action, canResume = false) {
  if (action === "resume_run") {
    if (state === "interrupted") return canResume ? null : "no resume handler was given to this panel";
    return "only an interrupted run can be resumed from here";
  }
  if (!LIVE.has(state)) return `the run is ${state || "not started"}: nothing to ${action === "checkpoint" ? "checkpoint" : action}`;
  if (action === "pause" && state !== "running") return `the run is ${state}`;
  if (action === "resume" && state !== "paused") return "the run is not paused";
  return null;
}
