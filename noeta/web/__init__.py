"""`noeta web`: watch and steer tasks in a browser. Server-rendered pages on Starlette
(an optional extra, `noeta[web]`), reading through the client and the store's views."""
