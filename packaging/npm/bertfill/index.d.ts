/** The absolute path of bertfill.so in the platform package for this machine
 *  (bertfill-linux-x64 or bertfill-linux-arm64). Throws an Error that names the
 *  platform and the packages that exist when there is none for it. */
export declare function getLoadablePath(): string;

/** A database that can load an extension: better-sqlite3's Database, or
 *  node:sqlite's DatabaseSync opened with { allowExtension: true }. */
export interface ExtensionLoadingDatabase {
  loadExtension(path: string, entryPoint?: string): unknown;
  enableLoadExtension?(allow: boolean): void;
}

/** Loads bertfill into db: bert_fill(), fill_candidates() and the rest. */
export declare function load(db: ExtensionLoadingDatabase): void;

declare const bertfill: { getLoadablePath: typeof getLoadablePath; load: typeof load };
export default bertfill;
