# The service image: `bun start` with ROLES from the environment (see fly.toml and .env.example).
FROM oven/bun:1.4.5 AS deps
WORKDIR /app
COPY package.json bun.lock ./
RUN bun install --frozen-lockfile --production

FROM oven/bun:1.4.5
WORKDIR /app
ENV NODE_ENV=production
COPY --from=deps /app/node_modules ./node_modules
COPY package.json bun.lock ./
# The package scripts run through scripts/bun.sh, which installs dependencies when its stamp is older than
# bun.lock/package.json: the stamp marks the production install above as current, so nothing installs at start.
COPY scripts ./scripts
COPY src ./src
COPY sql ./sql
COPY contracts/out ./contracts/out
RUN touch node_modules/.install-stamp \
  && mkdir -p /app/.data \
  && chown -R bun:bun /app/.data
# Unprivileged user shipped with the base image; PGlite (no DATABASE_URL) writes under /app/.data.
USER bun
ENV PORT=3000 HOST=0.0.0.0
EXPOSE 3000
CMD ["bun", "start"]
