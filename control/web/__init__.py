"""The browser's side of control/: what every app's pages build on, and control's own pages.

`pages`: the tenant and role check every page view is wrapped in (`tenant_member`), the home
page and the tenant switch, and the small helpers pages share. `health`: `/healthz`.
`dashboard`: django-rq's job pages, behind a superusers-only gate.
"""
