/** The dashboard's pages, in navigation order: a new page is one module and one line here. */
import { activityPage } from "./activity";
import { apiKeysPage } from "./api-keys";
import { overviewPage } from "./overview";
import type { Page } from "./page";
import { renewalsPage } from "./renewals";
import { revenuePage } from "./revenue";
import { subscriptionsPage } from "./subscriptions";
import { webhooksPage } from "./webhooks";

export const pages: Page[] = [
  overviewPage,
  revenuePage,
  subscriptionsPage,
  renewalsPage,
  activityPage,
  webhooksPage,
  apiKeysPage,
];
