// Storage on Airflow's home page: the storage-maintenance plugin's react_apps entry (destination "dashboard").
//
// Airflow's UI import()s this module, then renders globalThis.AirflowPlugin as a React component at the bottom of
// its dashboard. No build step: the component is made with the UI's own React (globalThis.React) and links with
// its router (globalThis.ReactRouterDOM.Link), both published by the UI before any plugin loads. Its figures come
// from the plugin's /storage-maintenance/api/dashboard (Airflow's login: the UI's _token cookie); each row links
// to its page inside the UI (a partition's page in the Storage view, a failed run's "Run summary" tab).
const React = globalThis.React;
const h = React.createElement;
const API = new URL("../api/dashboard", import.meta.url).href;
const REFRESH_MS = 30000;

function token() {
  const m = document.cookie.match(/(?:^|; )_token=([^;]*)/);
  return m ? decodeURIComponent(m[1]) : null;
}

function humanBytes(n) {
  if (n === null || n === undefined) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let v = n, i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return (i === 0 ? String(v) : v.toFixed(1)) + " " + units[i];
}

function pct(ratio) { return ratio === null || ratio === undefined ? "" : (100 * ratio).toFixed(1) + "%"; }

const color = {
  fg: "var(--chakra-colors-fg, inherit)", muted: "var(--chakra-colors-fg-muted, #666)",
  border: "var(--chakra-colors-border, #ddd)", subtle: "var(--chakra-colors-bg-subtle, transparent)",
  danger: "var(--chakra-colors-fg-error, #c53030)", ok: "var(--chakra-colors-fg-success, #2f855a)",
  link: "var(--chakra-colors-fg-info, #2b6cb0)",
};
const cellStyle = {padding: "4px 8px", borderBottom: "1px solid " + color.border, textAlign: "left",
                   verticalAlign: "top"};
const numStyle = Object.assign({}, cellStyle, {textAlign: "right", fontVariantNumeric: "tabular-nums",
                                               whiteSpace: "nowrap"});

// A link to a route of the UI: through its router when it has one (no reload), else a plain link under <base>.
function RouteLink(props) {
  const style = {color: color.link, fontWeight: 600};
  const Router = globalThis.ReactRouterDOM;
  if (Router && Router.Link) return h(Router.Link, {to: props.route, style: style, "data-route": props.route}, props.children);
  return h("a", {href: new URL(props.route.replace(/^\//, ""), document.baseURI).href, style: style,
                 "data-route": props.route}, props.children);
}

function Table(props) {
  return h("table", {id: props.id, style: {borderCollapse: "collapse", width: "100%", fontSize: "13px"}},
    h("thead", null, h("tr", null, props.head.map((c, i) =>
      h("th", {key: i, style: Object.assign({}, c.num ? numStyle : cellStyle, {color: color.muted, fontWeight: 600})}, c.label)))),
    h("tbody", null, props.rows.length ? props.rows :
      h("tr", null, h("td", {colSpan: props.head.length, style: Object.assign({}, cellStyle, {color: color.muted})}, props.empty))));
}

function Section(props) {
  return h("section", {"aria-label": props.title, style: {minWidth: 0}},
    h("h3", {style: {fontSize: "14px", fontWeight: 600, margin: "10px 0 6px"}}, props.title), props.children);
}

function Space(props) {
  return h(Table, {id: "storage-space", empty: "No log dir.", head: [
      {label: "log dir"}, {label: "partitions", num: true}, {label: "log bytes", num: true},
      {label: "use%", num: true}, {label: "available", num: true}, {label: "state"}],
    rows: props.dirs.map((d) => h("tr", {key: d.path, "data-path": d.path},
      h("td", {style: cellStyle}, h(RouteLink, {route: d.route}, h("code", null, d.path))),
      h("td", {style: numStyle}, d.partitions),
      h("td", {style: numStyle, title: d.size_bytes + " bytes"}, humanBytes(d.size_bytes)),
      h("td", {style: numStyle, "data-field": "used_percent"}, d.used_percent === null ? "" : d.used_percent.toFixed(1) + "%"),
      h("td", {style: numStyle}, humanBytes(d.free_bytes)),
      h("td", {style: cellStyle}, !d.online ? h("span", {style: {color: color.danger, fontWeight: 600}}, "offline")
        : d.problems ? h("span", {style: {color: color.danger, fontWeight: 600}}, d.problems + " problem(s)")
        : h("span", {style: {color: color.ok}}, "online")))),
  });
}

function Damage(props) {
  const more = props.total > props.rows.length ? " (" + props.rows.length + " of " + props.total + " shown)" : "";
  return h(React.Fragment, null,
    h(Table, {id: "storage-damage", empty: "No damage.", head: [{label: "partition"}, {label: "kind"}, {label: "what"}],
      rows: props.rows.map((x, i) => h("tr", {key: i, "data-partition": x.topic + "-" + x.partition, "data-kind": x.kind},
        h("td", {style: cellStyle}, h(RouteLink, {route: x.route}, x.topic + "-" + x.partition)),
        h("td", {style: cellStyle}, x.kind),
        h("td", {style: Object.assign({}, cellStyle, {color: color.danger})}, x.message)))}),
    more ? h("p", {style: {color: color.muted, fontSize: "12px"}}, props.partitions + " damaged partition(s)" + more) : null);
}

function Dirtiest(props) {
  return h(Table, {id: "storage-dirtiest", empty: "No compacted partition.", head: [
      {label: "partition"}, {label: "dirty ratio", num: true}, {label: "min.cleanable", num: true}, {label: "size", num: true}],
    rows: props.rows.map((p) => h("tr", {key: p.topic + "-" + p.partition, "data-partition": p.topic + "-" + p.partition},
      h("td", {style: cellStyle}, h(RouteLink, {route: p.route}, p.topic + "-" + p.partition)),
      h("td", {style: numStyle, "data-field": "dirty_ratio"}, pct(p.dirty_ratio)),
      h("td", {style: numStyle}, pct(p.min_cleanable_dirty_ratio)),
      h("td", {style: numStyle}, humanBytes(p.size_bytes))))});
}

function FailedRun(props) {
  const r = props.run;
  if (!r) return h("p", {id: "storage-last-failed", style: {color: color.muted}}, "No maintenance run has failed.");
  return h("div", {id: "storage-last-failed", "data-dag": r.dag_id, "data-run": r.run_id},
    h("p", {style: {margin: "0 0 4px"}}, h(RouteLink, {route: r.route}, r.dag_id + " " + r.run_id)),
    h("p", {style: {margin: 0, color: color.muted}}, r.end_date ? "ended " + r.end_date.replace("T", " ").slice(0, 19) + " UTC" : "not ended"),
    r.failed_tasks.length ? h("p", {style: {margin: "4px 0 0", color: color.danger}}, "failed: " + r.failed_tasks.join(", ")) : null);
}

function StoragePanel() {
  const [state, setState] = React.useState({data: null, error: null});
  React.useEffect(() => {
    let live = true;
    async function load() {
      try {
        const headers = {Accept: "application/json"};
        const t = token();
        if (t) headers.Authorization = "Bearer " + t;
        const r = await fetch(API, {headers: headers, credentials: "same-origin"});
        if (!r.ok) throw new Error(r.status + " " + (await r.text()).slice(0, 200));
        const data = await r.json();
        if (live) setState({data: data, error: null});
      } catch (e) {
        if (live) setState((s) => ({data: s.data, error: String(e && e.message || e)}));
      }
    }
    load();
    const timer = setInterval(load, REFRESH_MS);
    return () => { live = false; clearInterval(timer); };
  }, []);
  const d = state.data;
  const box = {border: "1px solid " + color.border, borderRadius: "8px", padding: "12px 16px", color: color.fg};
  const title = h("h2", {style: {fontSize: "18px", fontWeight: 600, margin: 0}},
    d ? h(RouteLink, {route: d.routes.storage}, "Storage") : "Storage");
  const status = state.error ? h("p", {role: "alert", style: {color: color.danger}}, "Storage figures unavailable: " + state.error)
    : !d ? h("p", {style: {color: color.muted}}, "Loading storage figures…") : null;
  return h("div", {id: "storage-maintenance-panel", "data-loaded": d ? "true" : "false", style: box},
    title, status,
    d ? h("div", {style: {display: "grid", gridTemplateColumns: "repeat(auto-fit, minmax(380px, 1fr))", gap: "8px 24px"}},
      h(Section, {title: "Space"}, h(Space, {dirs: d.space})),
      h(Section, {title: "Damage"}, h(Damage, {rows: d.damage, total: d.damage_total, partitions: d.damaged_partitions})),
      h(Section, {title: "Dirtiest partitions"}, h(Dirtiest, {rows: d.dirtiest}),
        h("p", {style: {color: color.muted, fontSize: "12px", margin: "4px 0 0"}}, d.dirtiest.length + " of " + d.compacted +
          " compacted partition(s); ", h(RouteLink, {route: d.routes.dirtiest}, "all by dirty ratio"))),
      h(Section, {title: "Last failed maintenance run"}, h(FailedRun, {run: d.last_failed_run}))) : null);
}

// The UI looks the component up by the plugin entry's name first (several plugins may load at once), then here.
globalThis["Storage maintenance"] = StoragePanel;
globalThis.AirflowPlugin = StoragePanel;
export default StoragePanel;
