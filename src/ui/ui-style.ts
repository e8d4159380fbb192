/** The one style sheet of the ui's pages, inline (allowed by its hash). */
export const UI_STYLE = `
body { font: 14px/1.4 system-ui, sans-serif; margin: 1rem 1.5rem; color: #222; }
header h1 { display: inline-block; margin: 0 1rem 0 0; font-size: 1.4rem; }
nav a { margin-right: .8rem; }
.note { color: #666; margin: .3rem 0 .8rem; }
.filters { margin: .5rem 0; display: flex; gap: 1rem; align-items: center; flex-wrap: wrap; }
table { border-collapse: collapse; margin: .5rem 0 1rem; }
th, td { border-bottom: 1px solid #ddd; padding: .25rem .6rem; text-align: left; white-space: nowrap; }
th { background: #f4f4f4; }
tr[data-status=running] td { background: #eef6ff; }
tr[data-status=failed] td, tr[data-status=budget] td { background: #fff1f0; }
tr[data-status=skipped] td, tr[data-status=refused] td { color: #777; }
.bar { background: #eee; height: 10px; width: 240px; display: inline-block; vertical-align: middle; }
.bar span { background: #3a7; height: 10px; display: block; }
button { margin: .2rem; }
.error { color: #b00; }
#live:empty { display: none; }
`;
