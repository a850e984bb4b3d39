/** What a page module exports: adding a page is one module plus one line in pages/index.ts. */
import type { Credential } from "../api";

/** What a page receives when it renders. */
export type PageContext = {
  credential: Credential;
  /** The element the page fills. */
  root: HTMLElement;
  /** Path segments after the page's own (e.g. the id of `#/subscriptions/42`). */
  args: string[];
  /** Query parameters of the hash (`#/activity?type=FAIL`). */
  query: URLSearchParams;
  /** Moves to another hash route. */
  navigate: (hash: string) => void;
};

/** A page of the dashboard. */
export type Page = {
  /** First path segment: `#/<id>`. */
  id: string;
  title: string;
  /** Shown only to wallet (SIWE) sessions. */
  sessionOnly?: boolean;
  render: (ctx: PageContext) => Promise<void>;
};
